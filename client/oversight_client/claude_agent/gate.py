"""``OversightGate``: the Claude Agent SDK asks it before a tool runs, Oversight decides.

Each call of a tool mapped to an Oversight ``Action`` is proposed under the SDK's
tool_use id. Once approved, the gate claims the operation and records its intent, then
allows the call with the input the reviewer approved; the tool itself runs inside the
Claude Code CLI (or in the SDK MCP server), and the ``PostToolUse`` hook reports it
applied. Anything else denies the call, with what the model should read: a rejection
with the reviewer's reason, an expiry, a cancelled run, a refused proposal, or an
Oversight still out of reach when the wait's deadline passed (fail closed: no answer is
never a yes; until then the gate asks again, as the proposal is idempotent).

Oversight cannot verify what a CLI tool did: an approved call whose intent was already
recorded (the agent stopped between allowing it and reporting it) is never allowed
again, and the server alerts a person once its lease has lapsed; a call that failed
(``PostToolUseFailure``) may have done part of its work, so it is reported uncertain
and alerted at once."""

import functools
import logging
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from claude_agent_sdk import (
    HookMatcher,
    PermissionResult,
    PermissionResultAllow,
    PermissionResultDeny,
    ToolPermissionContext,
)

from oversight_client.aio import AsyncOversight
from oversight_client.errors import (
    Conflict,
    InvalidRequest,
    OperationEnded,
    OversightError,
    RunClosed,
    StaleState,
    Unreachable,
    WaitTimedOut,
)
from oversight_client.follower import found_in
from oversight_client.reach import patiently
from oversight_client.storable import storable, storable_value
from oversight_client.told import UNREACHABLE, as_text, edited, in_order, interrupted, outcome
from oversight_client.waits import operation_settled

log = logging.getLogger(__name__)
MARK = "claude_agent_deferred"  # the data key of the run's message naming a deferred call
WAITING = "The agent's session waits for reviewers to decide on its call."
OUTPUT_BYTES = 16_000  # a tool's output as reported, at most (as JSON)
MARGIN = 60  # seconds the waiting hook's CLI timeout allows beyond the wait itself
UNMAPPED = "This tool is not allowed here: no Oversight action is configured for it."
MADE_ALREADY = (
    "This call may have been made already, before the agent stopped: it is not made "
    "again, and a person will check what happened."
)


@dataclass(frozen=True)
class Action:
    """The Oversight action a tool's calls are proposed as; ``summary`` (one line) is
    shown to reviewers, by default "<tool> call"."""

    name: str
    rollback_kind: str
    risk: str = "medium"
    summary: str = ""


@dataclass(frozen=True)
class Verdict:
    """The gate's answer: ``allow`` (with ``input``), ``deny`` (with ``reason``, for the
    model), ``defer`` (the call waits for reviewers) or ``pass`` (not supervised)."""

    behavior: str
    input: dict | None = None
    reason: str = ""


class OversightGate:
    """Tool calls of run ``run_id`` under oversight: ``actions`` maps the SDK's tool
    names (``Bash``, ``mcp__<server>__<tool>``…) to Oversight actions; tools named in
    ``unsupervised`` are left to the SDK's own permissions; any other tool is denied.
    ``timeout`` is how long a call waits for reviewers (or for Oversight to be in
    reach) before it is withdrawn and denied; ``lease_seconds`` must outlast a tool's
    run. ``repeated`` is the operation of a call interrupted when the agent stopped
    while it ran: the same call made again is denied, saying what came of it."""

    def __init__(
        self,
        ovs: AsyncOversight,
        run_id: int,
        actions: Mapping[str, Action],
        *,
        unsupervised: Collection[str] = (),
        timeout: float = 900,
        lease_seconds: int = 600,
        executor: str = "claude-agent-sdk",
        repeated: dict | None = None,
    ) -> None:
        self.ovs, self.run_id, self.actions = ovs, run_id, dict(actions)
        self.repeated = repeated
        self.unsupervised, self.timeout = frozenset(unsupervised), timeout
        self.lease_seconds, self.executor = lease_seconds, executor
        self._claimed: dict[str, tuple[int, int, dict]] = {}  # call id: op, epoch, proposed
        self.deferred: dict[str, int] = {}  # the calls this gate deferred: call id: op id

    def hooks(self, *, defer: bool = False) -> dict[str, list[HookMatcher]]:
        """The hooks for ``ClaudeAgentOptions.hooks``: ``PreToolUse`` asks Oversight
        (waiting for the decision, or with ``defer`` ending the query until it is
        made), always with ``on_failure="block"``: a hook that raises or times out
        blocks the call (the SDK's default would let it run); and the
        ``reporting_hooks``. A hook that allows a call skips ``can_use_tool``, and
        it sees every call, those the CLI would allow without asking too."""
        pre = functools.partial(self.pre_tool_use, defer=defer)
        waits = self.timeout + MARGIN  # for a reviewer, or (deferring) for Oversight in reach
        matcher = HookMatcher(hooks=[pre], timeout=waits, on_failure="block")
        return {"PreToolUse": [matcher], **self.reporting_hooks()}

    def reporting_hooks(self) -> dict[str, list[HookMatcher]]:
        """``PostToolUse`` and ``PostToolUseFailure``, which report what an allowed
        call did: with ``can_use_tool`` as the gate, add these to the options. Their
        failure (a report refused, say) blocks nothing: the call has run already."""
        return {
            "PostToolUse": [HookMatcher(hooks=[self.post_tool_use])],
            "PostToolUseFailure": [HookMatcher(hooks=[self.post_tool_use_failure])],
        }

    async def can_use_tool(
        self, tool_name: str, tool_input: dict[str, Any], context: ToolPermissionContext
    ) -> PermissionResult:
        """The SDK's ``can_use_tool``: proposes, waits, allows or denies."""
        verdict = await self.decide(tool_name, tool_input, context.tool_use_id or "")
        if verdict.behavior == "pass":
            return PermissionResultAllow()
        if verdict.behavior == "allow":
            return PermissionResultAllow(updated_input=verdict.input)
        return PermissionResultDeny(message=verdict.reason)

    async def pre_tool_use(
        self, hook_input: Any, tool_use_id: str | None, context: Any, *, defer: bool = False
    ) -> dict[str, Any]:
        verdict = await self.decide(
            hook_input["tool_name"],
            hook_input["tool_input"],
            tool_use_id or hook_input["tool_use_id"],
            session=hook_input["session_id"] if defer else None,
        )
        if verdict.behavior == "pass":
            return {}
        answer: dict[str, Any] = {
            "hookEventName": "PreToolUse",
            "permissionDecision": verdict.behavior,
        }
        if verdict.reason:
            answer["permissionDecisionReason"] = verdict.reason
        if verdict.input is not None:
            answer["updatedInput"] = verdict.input
        return {"hookSpecificOutput": answer}

    async def decide(
        self, tool: str, tool_input: dict, call_id: str, session: str | None = None
    ) -> Verdict:
        """Whether the call may run. With ``session`` (the durable path), a call that
        waits for reviewers is deferred and the session named on the run. Never
        raises: any failure denies the call."""
        action = self.actions.get(tool)
        if action is None and tool in self.unsupervised:
            return Verdict("pass")
        if action is None:
            return Verdict("deny", reason=UNMAPPED)
        if self._repeats(action, tool_input):
            said = interrupted(self.repeated["call_id"], self.repeated)
            return Verdict("deny", reason=f"This call was not made: it repeats one. {said}")
        try:
            deadline = time.monotonic() + self.timeout
            return await self._decide(tool, action, tool_input, call_id, session, deadline)
        except (OperationEnded, WaitTimedOut) as ended:
            return Verdict("deny", reason=outcome(ended))
        except (InvalidRequest, RunClosed) as refused:
            return Verdict("deny", reason=f"This call was not made: {refused.detail}")
        except Exception as error:
            log.exception("call %s of run %s: Oversight could not decide", call_id, self.run_id)
            if found_in(error, Unreachable) is not None:
                return Verdict("deny", reason=UNREACHABLE)
            why = f"This call was not made: Oversight could not be asked ({type(error).__name__})."
            return Verdict("deny", reason=why)

    def _repeats(self, action: Action, tool_input: dict) -> bool:
        made = self.repeated
        return made is not None and (
            action.name == made["action"]
            and tool_input in (made["proposed_arguments"], made["arguments"])
        )

    async def _decide(
        self,
        tool: str,
        action: Action,
        tool_input: dict,
        call_id: str,
        session: str | None,
        deadline: float,
    ) -> Verdict:
        """Propose the call and decide on it, all before ``deadline``: Oversight out of
        reach is waited for while the session is named and the call proposed (both may
        be sent again), then the wait for reviewers has what time is left."""
        if session is not None:
            # Named before it is proposed: an agent stopped in between finds the
            # session to resume (``OversightAgent.recover``), whose hook proposes again.
            naming = functools.partial(self._name, session, call_id)
            await patiently(naming, left(deadline))
        proposing = functools.partial(
            self.ovs.propose,
            self.run_id,
            call_id,
            action.name,
            tool_input,
            rollback_kind=action.rollback_kind,
            risk=action.risk,
            summary=(action.summary or f"{tool} call")[:300],
        )
        operation = await patiently(proposing, left(deadline))
        try:
            return await self._decided(tool, operation, tool_input, call_id, session, deadline)
        except Exception:
            waiting = operation["status"] == "proposed" and call_id not in self._claimed
            if session is None and waiting:  # nobody will make it: not for reviewers
                await self._withdraw(operation["id"])
            raise

    async def _name(self, session: str, call_id: str) -> None:
        deferred = {"session": session, "call": call_id}
        await self.ovs.message(self.run_id, WAITING, data={MARK: deferred})

    async def _withdraw(self, op_id: int) -> None:
        """Withdraw a proposal this gate gave up on, best effort: reviewers must not be
        left to approve a call nobody will make."""
        try:
            await self.ovs.withdraw(op_id, "The agent gave up on this call.")
        except (Conflict, OversightError) as error:  # decided or ended meanwhile, or away
            log.warning("proposal %s could not be withdrawn: %s", op_id, error)

    async def _decided(
        self,
        tool: str,
        operation: dict,
        tool_input: dict,
        call_id: str,
        session: str | None,
        deadline: float,
    ) -> Verdict:
        if not operation_settled(operation):  # raises if it ended without the effect
            if session is not None:
                self.deferred[call_id] = operation["id"]
                return Verdict("defer")
            operation = await self.ovs.wait(operation["id"], timeout=left(deadline))
        if operation["status"] == "committed":  # by Oversight, or before the agent stopped
            made = f"This call was made already: {as_text(operation['output'])}"
            return Verdict("deny", reason=made)
        try:
            claim = await self.ovs.claim(operation["id"], self.lease_seconds, self.executor)
        except StaleState:  # an executor holds it, or held it and stopped: maybe made
            return Verdict("deny", reason=MADE_ALREADY)
        if claim["intent"] is not None:
            return Verdict("deny", reason=MADE_ALREADY)
        snapshot = {"tool": tool, "tool_use_id": call_id}
        await self.ovs.record_intent(operation["id"], claim["epoch"], snapshot)
        self._claimed[call_id] = (operation["id"], claim["epoch"], tool_input)
        return Verdict("allow", input=in_order(claim["arguments"], tool_input))

    async def post_tool_use(self, hook_input: Any, tool_use_id: str | None, context: Any) -> dict:
        """Report the allowed call applied; tell the model of a reviewer's edit."""
        claimed = self._claimed.pop(tool_use_id or hook_input["tool_use_id"], None)
        if claimed is None:
            return {}
        op_id, epoch, proposed = claimed
        output = hook_input.get("tool_response")
        try:
            await self.ovs.report(
                op_id, epoch, effect="applied", output=storable_value(output, OUTPUT_BYTES)
            )
        except OversightError as error:  # the lease lapses: a person is alerted
            log.warning("call %s: its effect could not be reported: %s", op_id, error)
        approved = hook_input["tool_input"]
        if approved == proposed:
            return {}
        said = edited(in_order(approved, proposed), output)
        return {"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": said}}

    async def post_tool_use_failure(
        self, hook_input: Any, tool_use_id: str | None, context: Any
    ) -> dict:
        """A CLI tool that failed may have done part of its work, and Oversight cannot
        check: reported uncertain, for a person to reconcile."""
        claimed = self._claimed.pop(tool_use_id or hook_input["tool_use_id"], None)
        if claimed is not None:
            op_id, epoch, _ = claimed
            error = storable(str(hook_input.get("error") or "the tool failed"), 4000)
            try:
                await self.ovs.report(op_id, epoch, effect="uncertain", error=error)
                await self.ovs.roll_back(op_id, epoch, "alert", f"{error}; a CLI tool has no undo")
            except OversightError as failed:  # the lease lapses: a person is alerted
                log.warning("call %s: its failure could not be reported: %s", op_id, failed)
        return {}


def left(deadline: float) -> float:
    """The seconds until ``deadline`` (monotonic), never less than none."""
    return max(0.0, deadline - time.monotonic())
