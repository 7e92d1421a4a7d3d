"""Supervised tools, as steps: propose, wait for the decision, and (for an action the
agent executes) claim, record the intent, run the function once, verify, report; or
roll back. The function, ``verify`` and ``undo`` are called through ``Invoke`` steps, so
the async client accepts coroutine functions for any of them; each runs with the lease
renewed in the background (``Keep``), and a lease lost meanwhile ends the call with
``LeaseLost``: nothing more is recorded, and the next call with the same call_id takes
over and verifies first.

A takeover may find the effect absent while the executor it took over from is alive,
only slow or paused, and still firing it. The server records the step again (the effect
or the undo) only where the tool declares that its target deduplicates on the
idempotency key; otherwise it refuses (``earlier_attempt``) and the call reports the
effect uncertain and asks for an alert: a person decides, nothing is done twice."""

import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NoReturn

from oversight_client.core import Core
from oversight_client.errors import (
    Conflict,
    Failed,
    NotProposed,
    OversightError,
    StaleState,
    Unreachable,
    VerificationFailed,
)
from oversight_client.steps import Invoke, Keep, Sleep, Steps
from oversight_client.tool_options import ToolOptions
from oversight_client.waits import OPERATIONS, once

EFFECTS = ("applied", "absent", "uncertain")
EARLIER_ATTEMPT = "earlier_attempt"  # the server's refusal to take a step again


class LeaseLost(StaleState):
    """The operation's lease lapsed, or another call took it over, while the agent's
    function (or its undo) ran: this call records nothing more. The next call with the
    same call_id takes over and verifies first."""


@dataclass(frozen=True)
class Observed:
    """What ``verify`` saw: ``effect`` is one of ``EFFECTS``; ``output`` is what the
    function would have returned, as read back from the target, so that a call taking
    over after a crash returns it instead of None."""

    effect: str
    output: Any = None

    def __post_init__(self) -> None:
        if self.effect not in EFFECTS:
            raise TypeError(f"an effect is one of {EFFECTS}, not {self.effect!r}")


def observed(answer: Any) -> Observed:
    """A ``verify`` answer as an ``Observed``: True is applied, False uncertain."""
    if isinstance(answer, Observed):
        return answer
    if isinstance(answer, bool):
        return Observed("applied" if answer else "uncertain")
    if answer in EFFECTS:
        return Observed(str(answer))
    raise TypeError(f"verify must answer a bool, Observed or one of {EFFECTS}, not {answer!r}")


def supervised(
    core: Core,
    options: ToolOptions,
    fn: Callable[..., Any],
    run_id: int,
    call_id: str,
    arguments: dict,
) -> Steps[Any]:
    """One call of a supervised tool; returns the committed operation's output. Oversight
    out of reach while it is proposed is waited for, until the client's ``wait_timeout``
    (then ``NotProposed``). A call given up so once (by an adapter's approval hook, say)
    is not proposed again: its model is told it was not made, and that stays true."""
    if (run_id, call_id) in core.not_made:
        raise NotProposed(None, "unreachable", f"call {call_id} was given up: not proposed")
    try:
        proposed = yield from core.propose(
            run_id, call_id, arguments=arguments, patience=core.wait_timeout, **options.proposal
        )
    except Unreachable as away:
        raise NotProposed(None, "unreachable", away.detail) from away
    except (Exception, GeneratorExit):
        raise
    except BaseException as interrupted:  # cancelled, or Ctrl-C, on the way
        yield from withdraw_proposal(core, run_id, call_id, interrupted)
        raise
    while True:
        operation = yield from core.wait(proposed["id"])
        if operation["status"] == "committed":
            return operation["output"]
        if options.verify is None:
            raise TypeError(f"{options.action} is executed by the agent: give the tool a verify")
        claim = yield from claim_when_free(core, operation["id"], options)
        if claim is not None:
            break
    execution = Execution(
        core, operation, claim, fn, options.verify, options.undo, options.deduplicates
    )
    return (yield from execution.steps())


def withdraw_proposal(core: Core, run_id: int, call_id: str, cause: BaseException) -> Steps[None]:
    """Withdraw ``call_id``'s operation if its proposal got through before ``cause``
    interrupted it: best effort, as an interrupted wait does."""
    quick = Core(once(core.endpoint), None)
    try:
        found = yield from quick.find_operation(run_id=run_id, call_id=call_id)
    except OversightError:
        return
    if found is not None:
        yield from OPERATIONS.abandon(core.endpoint, found["id"], cause)


def claim_when_free(core: Core, op_id: int, options: ToolOptions) -> Steps[dict | None]:
    """Claim the operation. If an earlier executor holds its lease (renewing it while it
    works, or dead after firing the effect), wait for the lease to lapse and take over;
    the takeover's claim carries that executor's intent, so we verify first. None if
    that executor settled it meanwhile: ``wait`` tells how."""
    while True:
        try:
            return (yield from core.claim(op_id, options.lease_seconds, options.executor))
        except StaleState:
            current = yield from core.operation(op_id)
            if current["status"] not in ("in_flight", "verify_failed"):
                return None
            expires = current["lease"]["expires_at"]
            if not expires:
                raise
            remaining = datetime.fromisoformat(expires) - datetime.now(UTC)
            yield Sleep(max(0.2, remaining.total_seconds() + 0.2))


@dataclass(frozen=True)
class Execution:
    """Carrying out one claimed agent-executed operation. ``deduplicates``: the target
    makes a late repeat harmless (see the module's docstring)."""

    core: Core
    operation: dict
    claim: dict
    fn: Callable[..., Any]
    verify: Callable[..., Any]
    undo: Callable[..., Any] | None
    deduplicates: bool = False

    @property
    def op_id(self) -> int:
        return self.operation["id"]

    @property
    def epoch(self) -> int:
        return self.claim["epoch"]

    @property
    def key(self) -> str:
        return self.claim["idempotency_key"]

    @property
    def arguments(self) -> dict:
        return self.claim["arguments"]

    @property
    def taken_over(self) -> bool:
        """Whether an earlier executor recorded its intent: its effect may still land."""
        return self.claim["intent"] is not None

    def steps(self) -> Steps[Any]:
        """Verify an earlier attempt first; else record the intent, run, verify, report."""
        if self.claim.get("status") == "verify_failed":
            yield from self.roll_back("an earlier attempt could not verify its effect")
        if self.taken_over:
            seen = yield from self.observe()
            if seen.effect == "applied":
                return (yield from self.commit(seen.output))
            if seen.effect == "uncertain":
                why = "on resume, verification cannot tell whether the effect happened"
                yield from self.uncertain(why)
        if refused := (yield from self.intend({"function": self.fn.__qualname__})):
            yield from self.escalate(f"not fired again: {refused.detail}", refused)
        try:
            output = yield self.invoke(self.fn, (), {**self.arguments, "idempotency_key": self.key})
        except LeaseLost:
            raise
        except Exception as exc:
            return (yield from self.settle(None, f"{type(exc).__name__}: {exc}", exc))
        return (yield from self.settle(output, ""))

    def invoke(self, fn: Callable[..., Any], args: tuple, kwargs: dict | None = None) -> Invoke:
        """Call one of the agent's functions with the lease renewed every third of it."""
        seconds = self.claim["lease_seconds"]
        renew = functools.partial(renew_lease, self.core, self.op_id, self.epoch, seconds)
        return Invoke(fn, args, kwargs or {}, Keep(renew, seconds / 3))

    def intend(self, snapshot: dict) -> Steps[Conflict | None]:
        """Record the intent of the next step (the effect, or in verify_failed its undo)
        before taking it; returns the server's refusal if an earlier executor recorded
        its intent of the same step and the target does not deduplicate: that executor
        may still be taking it, so the step must not be taken."""
        body = {"epoch": self.epoch, "snapshot": snapshot, "deduplicates": self.deduplicates}
        try:
            yield from self.core.call("POST", f"/operations/{self.op_id}/intent", body)
        except Conflict as refused:
            if refused.code != EARLIER_ATTEMPT:
                raise
            return refused
        return None

    def observe(self) -> Steps[Observed]:
        return observed((yield self.invoke(self.verify, (self.arguments, self.key))))

    def settle(self, output: Any, error: str, cause: Exception | None = None) -> Steps[Any]:
        """Verify and report: commit, or raise ``Failed`` (absent) or, after the
        rollback plan, ``VerificationFailed`` (uncertain). Absent after a takeover is
        not final: the earlier executor's effect may still land."""
        seen = yield from self.observe()
        if seen.effect == "applied":
            # The function's own return value, unless it raised: then what verify saw.
            return (yield from self.commit(seen.output if cause else output))
        name = self.fn.__qualname__
        if seen.effect == "absent" and self.taken_over:
            why = f"{name}'s effect is not there, but an earlier attempt's may still land"
            yield from self.escalate(error or why, cause)
        if seen.effect == "absent":
            why = error or f"{name} ran but its effect is not there"
            ended = yield from self.core.report(
                self.op_id, self.epoch, effect="absent", error=why[:4000]
            )
            raise Failed.of(ended) from cause
        yield from self.uncertain(
            error or f"{name} ran but its effect could not be verified", cause
        )

    def commit(self, output: Any) -> Steps[Any]:
        yield from self.core.report(self.op_id, self.epoch, effect="applied", output=output)
        return output

    def uncertain(self, error: str, cause: Exception | None = None) -> Steps[NoReturn]:
        """Report an uncertain effect, then follow the rollback plan."""
        yield from self.core.report(self.op_id, self.epoch, effect="uncertain", error=error[:4000])
        yield from self.roll_back(error, cause)

    def escalate(self, error: str, cause: Exception | None = None) -> Steps[NoReturn]:
        """Report the effect uncertain because an earlier executor may still be firing it,
        and ask for an alert: an undo now could come before that effect and undo nothing."""
        yield from self.core.report(self.op_id, self.epoch, effect="uncertain", error=error[:4000])
        yield from self.rolled_back("alert", error, cause)

    def roll_back(self, error: str, cause: Exception | None = None) -> Steps[NoReturn]:
        """Undo the effect (or ask for an alert), and raise ``VerificationFailed``."""
        outcome, detail = yield from self.undone(error)
        yield from self.rolled_back(outcome, detail, cause)

    def rolled_back(self, outcome: str, detail: str, cause: Exception | None) -> Steps[NoReturn]:
        ended = yield from self.core.roll_back(self.op_id, self.epoch, outcome, detail[:4000])
        raise VerificationFailed.of(ended) from cause

    def undone(self, error: str) -> Steps[tuple[str, str]]:
        """The rollback outcome to report, and why."""
        if self.undo is None:
            return "alert", f"{error}; the tool has no undo"
        if refused := (yield from self.intend({"undo": self.undo.__qualname__})):
            return "alert", f"{error}; not undone again: {refused.detail}"
        try:
            yield self.invoke(self.undo, (self.arguments, self.key))
        except LeaseLost:
            raise
        except Exception as exc:
            return "alert", f"{error}; undo failed: {type(exc).__name__}: {exc}"
        kind = self.operation["rollback_kind"]
        return (
            "compensated" if kind == "compensating" else "rolled_back"
        ), f"undone after: {error}"


def renew_lease(core: Core, op_id: int, epoch: int, seconds: int) -> Steps[None]:
    """One heartbeat, sent once: a server out of reach is asked again at the next beat
    (a third of the lease later), and its answer decides; any refusal means the lease
    is lost."""
    body = {"epoch": epoch, "lease_seconds": seconds}
    try:
        yield from once(core.endpoint).call("POST", f"/operations/{op_id}/heartbeat", body)
    except Unreachable:
        return
    except OversightError as refused:
        raise LeaseLost(refused.status, refused.code, refused.detail) from refused
