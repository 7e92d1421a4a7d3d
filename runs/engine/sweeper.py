"""Settling operations an agent claimed and then abandoned.

An agent-executed operation has no worker to resume it: if the agent dies (or stops
reporting) its lease lapses and nothing else would ever look at it, so the run could
not finish and an effect that may have happened would go unreported. The worker
therefore sweeps every step for agent operations whose lease lapsed more than
``OVERSIGHT_AGENT_GRACE_SECONDS`` ago; the grace lets a restarted agent come back, wait
out its lease, claim again and verify first (``oversight_client``'s takeover). Then:

- in flight with an intent: the effect may have happened, and no one will verify it:
  verify_failed, then an out-of-band alert that halts the run for a person;
- verify_failed: the agent did not report its rollback: an alert;
- in flight without an intent: nothing fired (the API records no report and no effect
  before the intent), so the operation ends failed.

Each operation is settled in its own short transaction, under its run's lock and only
if it is still as the sweep saw it (times in the database's clock): an agent that came
back and claimed or reported meanwhile wins.
"""

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from runs.actions.base import Effect
from runs.actors import Actor
from runs.clock import db_now
from runs.engine.claims import LEASED
from runs.models import Operation
from runs.services.alerts import raise_alert
from runs.transitions import lock_run, transition_operation

Status = Operation.Status
SWEEPER = Actor.policy("agent lease lapsed")


def sweep_agent_operations(now: datetime | None = None) -> int:
    """Settle every agent operation abandoned past the grace by ``now`` (the database's
    time, read here unless the caller just did); returns how many."""
    now = now or db_now()
    return sum(
        _settle(op_id, run_id, now)
        for op_id, run_id in _abandoned(now).order_by("pk").values_list("pk", "run_id")
    )


def _abandoned(now: datetime):
    # Served by operation_leased_idx (status in flight or verify_failed, by lease expiry).
    cutoff = now - timedelta(seconds=settings.OVERSIGHT_AGENT_GRACE_SECONDS)
    return Operation.objects.filter(
        executor=Operation.Executor.AGENT, status__in=LEASED, lease_expires_at__lt=cutoff
    )


@transaction.atomic
def _settle(op_id: int, run_id: int, now: datetime) -> bool:
    lock_run(run_id)
    operation = _abandoned(now).filter(pk=op_id).first()
    if operation is None:
        return False  # The agent came back (claimed, reported) since the sweep looked.
    if operation.status == Status.VERIFY_FAILED:
        _alert(operation, "the agent did not report its rollback")
    elif operation.intent is not None:
        why = "the agent's lease lapsed after its intent: the effect may have happened"
        _end(operation, Status.VERIFY_FAILED, Effect.UNCERTAIN, why)
        _alert(operation, why)
    else:
        why = "the agent's lease lapsed before its intent: nothing fired"
        _end(operation, Status.FAILED, Effect.ABSENT, why)
    return True


def _end(operation: Operation, to: str, effect: Effect, why: str) -> None:
    changes = {"status_reason": why, "result": effect.observation(error=why)}
    if to not in LEASED:
        changes["lease_expires_at"] = None  # Nothing is left to do under it.
    transition_operation(operation=operation, to=to, actor=SWEEPER, reason=why, changes=changes)


def _alert(operation: Operation, summary: str) -> None:
    raise_alert(
        operation=operation,
        actor=SWEEPER,
        summary=summary,
        state_left={
            "arguments": operation.arguments,
            "intent": operation.intent,
            "lease": {
                "owner": operation.lease_owner,
                "epoch": operation.fencing_epoch,
                "expired_at": operation.lease_expires_at.isoformat(),
            },
        },
    )
