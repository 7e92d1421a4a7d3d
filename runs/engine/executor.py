"""Driving one claimed operation to its end, in the order that fires an effect exactly
once (seed 003, "the double executor"):

1. intent — the precondition is re-checked against the live target, what undo needs
   is captured, and the intent is recorded before anything fires;
2. execute with the idempotency key, outside any transaction;
3. verify by re-reading the target;
4. record committed — or verification failed, then the rollback plan.

A worker resuming an operation whose intent was recorded verifies first: if the effect
is there it records it without firing again. Every record is a conditional update on
the version the claim returned, so a worker whose lease was taken over records
nothing (``StaleVersion``) and stops.
"""

import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from runs.actions.base import Context, PreconditionFailed
from runs.actions.registry import get_action, parse_arguments
from runs.actors import Actor
from runs.engine.boundaries import EXECUTED, INTENT, ROLLING_BACK, VERIFIED, reach
from runs.errors import InvalidInput
from runs.models import Operation, Run
from runs.payloads import MessageKind
from runs.services.alerts import raise_alert
from runs.services.runs import append_message
from runs.transitions import ArtifactRef, lock_run, transition_operation

log = logging.getLogger(__name__)
Status = Operation.Status


class Execution:
    def __init__(self, operation: Operation, worker: str, lease) -> None:
        self.op = operation
        self.actor = Actor.worker(worker)
        self.lease = lease
        self.action = get_action(operation.action)
        self.key = operation.idempotency_key
        self.ctx = Context(operation=operation, intent=operation.intent or {})

    def run(self) -> None:
        if self.action is None:
            return self._unusable(f"no registered action is named {self.op.action!r}")
        try:
            self.args = parse_arguments(self.action, self.op.arguments)
        except InvalidInput as error:
            return self._unusable(f"the approved arguments no longer fit the action: {error}")
        if self.op.status == Status.VERIFY_FAILED:
            return self._roll_back("resumed after a crash during rollback")
        if self.op.intent is not None and self._verify():
            return self._record(
                Status.COMMITTED,
                "verified on resume: the effect was already there",
                result={"verified": True, "recovered": True},
            )
        if self._cancelled():
            return self._record(Status.CANCELLED, "run cancelled before the effect fired")
        try:
            self.action.precondition(self.args, self.ctx)
        except PreconditionFailed as error:
            return self._precondition_failed(str(error))
        self._record_intent(self.action.snapshot(self.args, self.ctx))
        reach(INTENT, self.op)
        if self._cancelled():
            return self._record(Status.CANCELLED, "run cancelled before the effect fired")
        self._execute_and_verify()

    def _execute_and_verify(self) -> None:
        result, error = None, ""
        try:
            result = self.action.execute(self.args, self.key, self.ctx)
        except Exception as exc:  # The effect may still have happened: verify decides.
            error = f"{type(exc).__name__}: {exc}"
        reach(EXECUTED, self.op)
        verified = self._verify()
        reach(VERIFIED, self.op)
        if verified:
            return self._record(
                Status.COMMITTED,
                "executed and verified",
                result={"verified": True, "output": result},
            )
        why = error or "verification found the effect missing"
        self._record(Status.VERIFY_FAILED, why, result={"verified": False, "error": why})
        self._roll_back(why)

    def _verify(self) -> bool:
        try:
            return bool(self.action.verify(self.args, self.key, self.ctx))
        except Exception as exc:
            log.warning("verification of operation %s raised %r", self.op.pk, exc)
            return False

    def _roll_back(self, why: str) -> None:
        reach(ROLLING_BACK, self.op)
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
        try:
            step(self.args, self.key, self.ctx)
        except Exception as exc:
            return self._alert(f"verification failed ({why}) and the {kind} rollback failed: {exc}")
        self._record(outcome, f"verification failed ({why}); {kind} rollback done")

    def _unusable(self, why: str) -> None:
        """The action cannot run here. Before any intent nothing can have fired; after
        one, the effect is uncertain and cannot be verified: a person must look."""
        if self.op.intent is None:
            return self._precondition_failed(why)
        self._record(Status.VERIFY_FAILED, why, result={"verified": False, "error": why})
        self._alert(f"cannot verify or roll back: {why}")

    def _cancelled(self) -> bool:
        return Run.objects.filter(pk=self.op.run_id, cancel_requested=True).exists()

    def _record_intent(self, snapshot: dict) -> None:
        self.ctx.intent = snapshot
        self._record(
            Status.IN_FLIGHT,
            "precondition holds; executing",
            event="operation.intent",
            changes={"intent": snapshot, "lease_expires_at": timezone.now() + self.lease},
            artifacts=[ArtifactRef(name, a) for name, a in self.ctx.artifacts.items()],
        )

    @transaction.atomic
    def _precondition_failed(self, why: str) -> None:
        self._record(Status.PRECONDITION_FAILED, why, result={"precondition_failed": why})
        run = lock_run(self.op.run_id)
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
        artifacts=(),
    ) -> None:
        fields = dict(changes or {})
        if result is not None:
            fields["result"] = result
            fields["status_reason"] = reason
        if to not in (Status.IN_FLIGHT, Status.VERIFY_FAILED):
            fields["lease_expires_at"] = None
        detail = {"observation": result} if result is not None else None
        transition_operation(
            operation=self.op,
            to=to,
            actor=self.actor,
            reason=reason,
            event=event,
            changes=fields,
            detail=detail,
            artifacts=artifacts,
        )
