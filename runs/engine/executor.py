"""Driving one claimed operation to its end, so that an approved effect happens at most
once, and exactly once wherever the target makes that possible (seed 003, "the double
executor"):

1. If an earlier attempt recorded its intent, it may have fired: verify first. Applied
   → committed. Absent → carry on as a first attempt only if the target makes a late
   repeat of that earlier attempt harmless (``Action.deduplicates``); otherwise, and
   whenever the answer is uncertain, the rollback plan (which alerts a person when it
   cannot see the effect). "Not verified" is never read as "never fired": where the
   earlier attempt's effect may still land (``Action.absence_is_final``), a cancel, a
   failed precondition or a refusal after the takeover is uncertain, not "not executed".
2. Re-check cancel and the precondition, capture what undo needs, and record the intent
   with the epoch about to fire, in a transaction that is also the last cancel check.
3. Confirm the lease (this epoch, time left, in the database's clock) and execute with
   the idempotency key outside any transaction — or, for an effect inside Oversight's
   database, execute, verify and record the outcome in one transaction under the lease.
4. Verify: applied → committed. Refused by the target (``NotApplied``) → failed: the
   effect did not happen, nothing is rolled back. Anything else (absent although the
   target accepted the call, uncertain, an error) → verify_failed, then the rollback
   plan. A rollback step of a target that does not deduplicate is not repeated after an
   interruption: a person checks.

A restore from a backup (``runs.backups``) takes over every operation that was approved
or in flight then, as after a lost lease: its effect may have happened between the
backup and the disaster. One that had recorded no intent is given the restore's
(``NOTHING_CAPTURED``): verified first like any other, but with nothing captured
before the effect no rollback step can tell what to reverse, so where the plan would
take one, a person is alerted instead. A rollback under way at backup time may have
been taken since: it is repeated only where repeating is harmless. An effect whose
record lives in the database (``Action.recorded_in_database``: a mail's ``SentEmail``)
found absent after a restore is uncertain: the record is the backup's.

An effect inside Oversight's database takes all of this in the one transaction that
claims it (``run_at_once``), when it goes as usual: nothing is committed before the end,
so a crash leaves nothing to resume, and no other worker can take the operation
meanwhile. Anything unusual rolls back to the claim and goes step by step.

A heartbeat renews the lease while the action runs; a worker that loses it fires
nothing further and records nothing (``LeaseLost``, ``StaleVersion``). An unexpected
error is recorded and retried by a later attempt after a backoff; after
``OVERSIGHT_MAX_ATTEMPTS`` the operation ends failed (before its intent) or takes the
rollback plan (after it), so a poison operation cannot loop forever. Attempts are counted
when claimed (``runs.engine.claims``), so one that killed or wedged its worker counts
too, and a claim past the budget gives up before doing anything.

What the agent, the alert and its emails are told of an error is an action's own words
or a fixed description (``plain_reason``): an exception's text may name absolute server
paths, hosts or data, and goes to the server log only, with the operation's id. Not to
a checkpoint either: the project's agents read checkpoints too, and they are kept
forever.
"""

import logging
import time
from contextlib import nullcontext
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction

from runs import shared_workspace
from runs.actions.base import (
    Context,
    Effect,
    NotApplied,
    NothingToRollBack,
    PreconditionFailed,
    TryLater,
    foreseen,
    plain_reason,
)
from runs.actions.registry import get_action, parse_arguments
from runs.actors import Actor
from runs.clock import db_now
from runs.engine.boundaries import EXECUTED, INTENT, ROLLING_BACK, VERIFIED, reach
from runs.engine.claims import LEASED
from runs.engine.lease import Lease, LeaseLost
from runs.errors import InvalidInput, StaleVersion
from runs.models import Operation, Run
from runs.payloads import MessageKind
from runs.services.alerts import raise_alert
from runs.services.runs import append_message
from runs.shared_workspace import NotShared
from runs.transitions import ArtifactRef, lock_run, transition_operation

log = logging.getLogger(__name__)
Status = Operation.Status
ROLLBACK_INTENT = "operation.rollback_intent"
# The checkpoint of an operation a restore took over, and the key of the intent it gives
# one that had none (``runs.backups``).
RESTORED = "operation.restored"
NOTHING_CAPTURED = "restored_with_nothing_captured"


class Execution:
    def __init__(self, operation: Operation, worker: str, lease: timedelta) -> None:
        self.op = operation
        self.worker = worker
        self.actor = Actor.worker(worker)
        self.lease = Lease(operation, lease)
        self.action = get_action(operation.action)
        self.key = operation.idempotency_key
        self.ctx = Context(operation=operation, intent=operation.intent or {}, lease=self.lease)
        # An earlier attempt recorded its intent, and its effect may still land.
        self.earlier_may_fire = False
        # How long this attempt's effect and verification took (ms), recorded with the
        # result: the histograms of /metrics.
        self.timings: dict[str, int] = {}

    def run(self) -> None:
        """Drive the operation as far as this worker can; never raises for the
        operation's own failures (those are recorded), only for losing it, or for
        handing it back (``NotShared``: this worker cannot carry it out)."""
        with self.lease.kept():
            try:
                self._drive()
            except (LeaseLost, StaleVersion):
                raise
            except NotShared as refused:
                self._hand_back(refused)
                raise
            except Exception as error:
                self._attempt_failed(error)

    @property
    def at_once_applies(self) -> bool:
        """Whether ``run_at_once`` can carry the operation out: a first attempt (no intent
        yet) at an effect inside Oversight's database."""
        return (
            self.action is not None
            and self.action.in_database
            and self.op.status == Status.IN_FLIGHT
            and self.op.intent is None
            and not self._out_of_attempts
        )

    @property
    def _out_of_attempts(self) -> bool:
        """Every attempt the budget allows was claimed before this one, and none lived
        to record how it ended: each killed or wedged its worker."""
        return self.op.attempts > settings.OVERSIGHT_MAX_ATTEMPTS

    def run_at_once(self, run: Run) -> bool:
        """Carry out an effect inside Oversight's database in the caller's transaction,
        the one that claimed the operation and holds ``run``'s lock: precondition,
        intent, effect, verification and commit, each its own checkpoint, committed
        together (one durable write instead of three, and nothing for a heartbeat to
        keep: no other worker can take the operation while the lock is held). Only
        the way things usually go: a cancel, a failed precondition, a refusal, an
        error or an effect that verification does not show rolls all of it back to
        the claim and returns False, and ``run()`` then takes the protocol step by
        step, recording what happens. Call it on copies of the claimed operation and
        of the run: what a rolled-back step wrote into them is not true any more."""
        if not self.at_once_applies:
            return False
        try:
            with transaction.atomic():
                self.args = parse_arguments(self.action, self.op.arguments)
                if run.cancel_requested:
                    raise _StepByStep
                self.action.precondition(self.args, self.ctx)
                self._write_intent(self.action.snapshot(self.args, self.ctx), run, renew=False)
                reach(INTENT, self.op)
                started = time.monotonic()
                output = self.action.execute(self.args, self.key, self.ctx)
                self.timings["execution_ms"] = _ms_since(started)
                reach(EXECUTED, self.op)
                effect = self._verify()
                reach(VERIFIED, self.op)
                if effect != Effect.APPLIED:
                    raise _StepByStep
                self._settle(effect, output, "", "", run)
        except _StepByStep:
            return False
        except Exception as error:  # Step by step, the error is met again and recorded.
            self._explain(error, "carrying it out in the claim's transaction")
            return False
        return True

    def _drive(self) -> None:
        if self._out_of_attempts:
            attempts = settings.OVERSIGHT_MAX_ATTEMPTS
            return self._give_up(f"gave up after {attempts} attempts that ended their worker")
        if self.action is None:
            return self._unusable(f"no registered action is named {self.op.action!r}")
        if self.op.action in shared_workspace.ACTIONS:  # Before a verify or an undo too.
            shared_workspace.require_shared(self.worker)
        try:
            self.args = parse_arguments(self.action, self.op.arguments)
        except InvalidInput as error:
            return self._unusable(f"the approved arguments no longer fit the action: {error}")
        if self.op.status == Status.VERIFY_FAILED:
            return self._resume_rollback()
        if self.op.intent is not None and not self._may_carry_on():
            return
        if self._cancelled():
            return self._end_unfired(Status.CANCELLED, "run cancelled before the effect fired")
        try:
            self.action.precondition(self.args, self.ctx)
        except PreconditionFailed as error:
            return self._end_unfired(Status.PRECONDITION_FAILED, str(error))
        if not self._record_intent(self.action.snapshot(self.args, self.ctx)):
            return self._end_unfired(Status.CANCELLED, "run cancelled before the effect fired")
        reach(INTENT, self.op)
        self._fire()

    def _may_carry_on(self) -> bool:
        """An earlier attempt recorded its intent, so it may have fired. Settle what
        verification shows, unless the effect is absent and firing again is harmless."""
        effect = self._verify()
        if effect == Effect.APPLIED:
            self._record(
                Status.COMMITTED,
                "verified on resume: the effect was already there",
                result=effect.observation(recovered=True),
            )
            return False
        if effect == Effect.UNCERTAIN:
            self._uncertain("on resume, verification cannot tell whether the effect happened")
            return False
        if self.action.recorded_in_database and self._restored():
            self._uncertain(
                "restored from a backup: the effect's record is the backup's, so that it is "
                "not there cannot tell whether it happened after the backup"
            )
            return False
        if not self.action.deduplicates(self.args):
            self._uncertain(
                "on resume the effect is not there, but the earlier attempt may still fire "
                "it and the target does not deduplicate: firing again could make it twice"
            )
            return False
        self.earlier_may_fire = not self.action.absence_is_final(self.args)
        if self._restored_after_its_approval():
            self._end_unfired(
                Status.FAILED,
                "restored from a backup after its approval lapsed: not carried out late",
            )
            return False
        return True

    def _restored_after_its_approval(self) -> bool:
        """A restore took it over before any worker had claimed it, and its approval has
        lapsed since (the restore may come long after the backup): firing now would act
        on an approval that no longer holds."""
        lapses = self.op.approval_expires_at
        return (
            NOTHING_CAPTURED in (self.op.intent or {}) and lapses is not None and lapses <= db_now()
        )

    def _restored(self) -> bool:
        return self.op.checkpoints.filter(event=RESTORED).exists()

    def _end_unfired(self, status: str, why: str) -> None:
        """End without firing — unless an earlier attempt's effect may still land, when
        "not executed" would be a guess."""
        if self.earlier_may_fire:
            return self._uncertain(f"{why}; but the earlier attempt's effect may still land")
        if status == Status.CANCELLED:
            return self._record(status, why)
        self._not_executed(status, why)

    def _fire(self) -> None:
        if self.action.in_database:
            return self._fire_in_database()
        self.lease.confirm()
        output, refusal, error = None, "", ""
        started = time.monotonic()
        try:
            output = self.action.execute(self.args, self.key, self.ctx)
        except NotApplied as exc:
            refusal = str(exc)
        except (LeaseLost, TryLater):
            raise  # Nothing fired: retried by a later attempt, if one is still due.
        except Exception as exc:  # The effect may still have happened: verify decides.
            error = self._explain(exc, "execute")
        self.timings["execution_ms"] = _ms_since(started)
        reach(EXECUTED, self.op)
        effect = self._verify()
        reach(VERIFIED, self.op)
        if self._settle(effect, output, refusal, error) == Status.VERIFY_FAILED:
            self._roll_back(self.op.status_reason)

    def _fire_in_database(self) -> None:
        """The effect and its record commit together, under the run lock and only while
        this epoch holds the lease: exactly once by construction."""
        with transaction.atomic():
            run = self.lease.confirm()
            output, refusal = None, ""
            started = time.monotonic()
            try:
                with transaction.atomic():
                    output = self.action.execute(self.args, self.key, self.ctx)
            except NotApplied as exc:
                refusal = str(exc)
            self.timings["execution_ms"] = _ms_since(started)
            reach(EXECUTED, self.op)
            effect = Effect.ABSENT if refusal else self._verify()
            reach(VERIFIED, self.op)
            settled = self._settle(effect, output, refusal, "", run)
        if settled == Status.VERIFY_FAILED:
            self._roll_back(self.op.status_reason)

    def _settle(
        self, effect: Effect, output: Any, refusal: str, error: str, run: Run | None = None
    ) -> str:
        """Record what the attempt achieved; returns the status recorded. Only the
        target's refusal says the effect did not happen: absent after it accepted the
        call may be an effect still on its way (or already undone by someone). ``run``
        is the run if this transaction holds its lock already."""
        if effect == Effect.APPLIED:
            result = effect.observation(output=output)
            self._record(Status.COMMITTED, "executed and verified", result=result, run=run)
        elif refusal and not self.earlier_may_fire:
            result = Effect.ABSENT.observation(error=refusal)
            why = f"the effect did not happen: {refusal}"
            self._record(Status.FAILED, why, result=result, run=run)
        elif effect == Effect.ABSENT and not (refusal or error):
            self._record_uncertain(
                "the target accepted the call, but verification does not show the effect", run
            )
        else:
            self._record_uncertain(
                refusal or error or "verification cannot confirm the effect as approved", run
            )
        return self.op.status

    def _verify(self) -> Effect:
        started = time.monotonic()
        try:
            return Effect.of(self.action.verify(self.args, self.key, self.ctx))
        finally:
            self.timings["verification_ms"] = _ms_since(started)

    def _uncertain(self, why: str) -> None:
        self._record_uncertain(why)
        self._roll_back(why)

    def _record_uncertain(self, why: str, run: Run | None = None) -> None:
        result = Effect.UNCERTAIN.observation(error=why)
        self._record(Status.VERIFY_FAILED, why, result=result, run=run)

    def _roll_back(self, why: str) -> None:
        """Undo or compensate, fenced like the effect itself; a step that cannot see the
        forward effect, or fails, leaves it to a person (out-of-band alert)."""
        reach(ROLLING_BACK, self.op)
        if NOTHING_CAPTURED in (self.op.intent or {}):
            return self._alert(
                f"verification failed ({why}); restored from a backup, with nothing captured "
                "before the effect: no rollback step can tell what to reverse"
            )
        kind = self.op.rollback_kind
        steps = {
            Operation.RollbackKind.IN_BAND: (self.action.undo, Status.ROLLED_BACK),
            Operation.RollbackKind.COMPENSATING: (self.action.compensate, Status.COMPENSATED),
        }
        if kind not in steps:
            plan = Operation.RollbackKind(kind).label
            return self._alert(
                f"verification failed ({why}); rollback is {plan}: a person must reconcile"
            )
        step, outcome = steps[kind]
        done = f"verification failed ({why}); {kind} rollback done"
        in_database = self.action.in_database
        if not self._repeatable():  # So that a takeover knows the step may have been taken.
            self._record(Status.VERIFY_FAILED, f"{kind} rollback", event=ROLLBACK_INTENT)
        try:
            with transaction.atomic() if in_database else nullcontext():
                self.lease.confirm()
                step(self.args, self.key, self.ctx)
                if in_database:  # The reversal and its record commit together.
                    self._record(outcome, done)
        except (LeaseLost, StaleVersion, TryLater):
            raise  # TryLater: nothing was done; a later attempt takes the step again.
        except NothingToRollBack as nothing:
            self._reload()
            return self._alert(f"verification failed ({why}); nothing was rolled back: {nothing}")
        except Exception as exc:
            failed = self._explain(exc, f"{kind} rollback")
            self._reload()
            return self._alert(
                f"verification failed ({why}) and the {kind} rollback failed: {failed}"
            )
        if not in_database:
            self._record(outcome, done)

    def _resume_rollback(self) -> None:
        """An earlier worker stopped during the rollback plan. A step that is safe to
        repeat (in the database, or at a target that deduplicates) is taken again;
        otherwise, if it may have been taken already (its intent is recorded, or the
        operation was restored from a backup taken before it), a person must check."""
        taken = self.op.checkpoints.filter(event__in=(ROLLBACK_INTENT, RESTORED)).exists()
        if taken and not self._repeatable():
            return self._alert(
                "an interrupted worker may already have taken the rollback step, and the "
                "target does not deduplicate: taking it again could reverse the effect twice"
            )
        self._roll_back("resumed after an interrupted rollback")

    def _repeatable(self) -> bool:
        """Whether taking a step again after an interruption is harmless."""
        return self.action.in_database or self.action.deduplicates(self.args)

    def _reload(self) -> None:
        """Read the operation again after a rolled-back transaction (whose record may
        have moved the instance on); raise if another worker holds it now."""
        self.op.refresh_from_db()
        if self.op.status not in LEASED or self.op.fencing_epoch != self.lease.epoch:
            raise LeaseLost(f"operation {self.op.pk} was recorded or taken over meanwhile")

    def _hand_back(self, refused: NotShared) -> None:
        """Let another worker take the operation at once, where it stands, this attempt
        not counted: nothing was done (the check comes before any effect or step)."""
        self._reload()
        self._record(
            self.op.status,
            "handed back: this worker's workspace is not the shared one",
            event="operation.handed_back",
            changes={"lease_expires_at": db_now(), "attempts": max(0, self.op.attempts - 1)},
        )
        log.warning("operation %s handed back: %s", self.op.pk, refused)

    def _attempt_failed(self, error: Exception) -> None:
        """An unexpected error: retried by a later attempt after a backoff, until the
        attempt budget is spent."""
        why = self._explain(error, f"attempt {self.op.attempts}")
        self._reload()
        if self.op.attempts < settings.OVERSIGHT_MAX_ATTEMPTS:
            backoff = min(self.lease.length, timedelta(seconds=2**self.op.attempts))
            return self._record(
                self.op.status,
                f"attempt {self.op.attempts} failed: {why}; retried in {backoff.seconds} s",
                event="operation.attempt_failed",
                changes={"lease_expires_at": db_now() + backoff},
            )
        self._give_up(f"gave up after {self.op.attempts} attempts: {why}")

    def _give_up(self, why: str) -> None:
        """The attempt budget is spent: before the intent nothing fired (failed); in
        flight the effect is uncertain (the rollback plan); rolling back, a person."""
        if self.op.intent is None:
            return self._not_executed(Status.FAILED, why)
        if self.op.status == Status.IN_FLIGHT:
            return self._uncertain(why)
        self._alert(why)

    def _explain(self, error: Exception, during: str) -> str:
        """``error`` in words fit for the agent and the alert; its own text (and, for an
        error no action raised on purpose, its traceback) goes to the server log."""
        log.warning(
            "operation %s, %s: %s: %s",
            self.op.pk,
            during,
            type(error).__name__,
            error,
            exc_info=None if foreseen(error) else error,
        )
        return plain_reason(error)

    def _unusable(self, why: str) -> None:
        """The action cannot run here. Before any intent nothing can have fired; after
        one, the effect is uncertain and cannot be verified: a person must look."""
        if self.op.intent is None:
            return self._not_executed(Status.PRECONDITION_FAILED, why)
        self._record_uncertain(why)
        self._alert(f"cannot verify or roll back: {why}")

    def _cancelled(self) -> bool:
        return Run.objects.filter(pk=self.op.run_id, cancel_requested=True).exists()

    @transaction.atomic
    def _record_intent(self, snapshot: dict) -> bool:
        """Record the intent, unless the run was cancelled (False): under the run lock,
        this is the last cancel check before the effect fires."""
        run = lock_run(self.op.run_id)
        if run.cancel_requested:
            return False
        self._write_intent(snapshot, run)
        return True

    def _write_intent(self, snapshot: dict, run: Run, renew: bool = True) -> None:
        """The intent's checkpoint, with the epoch about to fire, in the caller's
        transaction holding ``run``'s lock; the lease renewed from now (``renew``),
        unless it was taken in that same transaction (``run_at_once``): a lease
        nothing can outlive, since no other worker can take the operation before the
        transaction ends."""
        self.ctx.intent = snapshot
        changes = {"intent": snapshot}
        if renew:
            changes["lease_expires_at"] = db_now() + self.lease.length
        self._record(
            Status.IN_FLIGHT,
            "precondition holds; executing",
            run=run,
            event="operation.intent",
            changes=changes,
            detail={"attempt": {"epoch": self.lease.epoch, "number": self.op.attempts}},
            artifacts=[ArtifactRef(name, a) for name, a in self.ctx.artifacts.items()],
        )

    @transaction.atomic
    def _not_executed(self, status: str, why: str) -> None:
        """End without the effect (precondition failed, or gave up before the intent)
        and tell the run why."""
        run = lock_run(self.op.run_id)
        self._record(status, why, result={status: why}, run=run)
        if run.is_terminal:
            return
        append_message(
            run=run,
            kind=MessageKind.SYSTEM,
            payload={"text": f"Operation {self.op.pk} ({self.op.action}) was not executed: {why}"},
            actor=self.actor,
        )

    def _alert(self, summary: str) -> None:
        raise_alert(
            operation=self.op,
            actor=self.actor,
            summary=summary,
            state_left={"arguments": self.op.arguments, "intent": self.op.intent},
        )

    def _record(
        self,
        to: str,
        reason: str,
        *,
        result: Any = None,
        event: str = "operation.status",
        changes: dict | None = None,
        detail: dict | None = None,
        artifacts=(),
        run: Run | None = None,
    ) -> None:
        """Record a transition of the operation; ``run`` as in ``transition_operation``."""
        fields = dict(changes or {})
        if result is not None:
            fields["result"] = result
            fields["status_reason"] = reason
            fields.update(self.timings)
        if to not in LEASED:
            fields["lease_expires_at"] = None
        detail = {**(detail or {}), **({"observation": result} if result is not None else {})}
        transition_operation(
            operation=self.op,
            to=to,
            actor=self.actor,
            reason=reason,
            event=event,
            changes=fields,
            detail=detail or None,
            artifacts=artifacts,
            run=run,
        )


class _StepByStep(Exception):
    """Not the usual way: ``run_at_once`` rolls back to the claim."""


def _ms_since(started: float) -> int:
    return round((time.monotonic() - started) * 1000)
