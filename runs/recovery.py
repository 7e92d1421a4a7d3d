"""Seed 000's three recovery cases: what the next worker (or a restarted agent) can
conclude from what is stored, and so what it may do next."""

from dataclasses import dataclass

from django.db import models

from runs.models import Operation, Run


class RecoveryCase(models.TextChoices):
    NO_DECISION = "no_decision", "no decision"
    DECISION_NO_RESULT = "decision_no_result", "decision but no result"
    RESULT_AND_CHECKPOINT = "result_and_checkpoint", "result and checkpoint"


_UNCERTAIN = {
    Operation.Status.APPROVED,
    Operation.Status.IN_FLIGHT,
    Operation.Status.VERIFY_FAILED,
}

GUIDANCE = {
    RecoveryCase.NO_DECISION: "No accepted proposal is stored: it is safe to decide again.",
    RecoveryCase.DECISION_NO_RESULT: (
        "A decision is stored without its result: ask for the operation's state and "
        "repeat it only under its idempotency key."
    ),
    RecoveryCase.RESULT_AND_CHECKPOINT: (
        "The observation is durable: continue from it without running the tool again."
    ),
}


def operation_case(status: str) -> RecoveryCase:
    if status == Operation.Status.PROPOSED:
        return RecoveryCase.NO_DECISION
    if status in _UNCERTAIN:
        return RecoveryCase.DECISION_NO_RESULT
    return RecoveryCase.RESULT_AND_CHECKPOINT


@dataclass(frozen=True)
class RecoveryReport:
    case: RecoveryCase
    operations: list[dict]

    @property
    def guidance(self) -> str:
        return GUIDANCE[self.case]


def recovery_report(run: Run) -> RecoveryReport:
    """The run's case is its most delicate operation's: an uncertain effect first,
    then a proposal without a decision; only when every operation has its result is
    the run in "result and checkpoint". A run with no operations has no decision."""
    operations = [
        {"id": pk, "call_id": call_id, "status": status, "case": operation_case(status).value}
        for pk, call_id, status in run.operations.order_by("pk").values_list(
            "pk", "call_id", "status"
        )
    ]
    cases = {op["case"] for op in operations}
    if RecoveryCase.DECISION_NO_RESULT in cases:
        case = RecoveryCase.DECISION_NO_RESULT
    elif RecoveryCase.NO_DECISION in cases or not operations:
        case = RecoveryCase.NO_DECISION
    else:
        case = RecoveryCase.RESULT_AND_CHECKPOINT
    return RecoveryReport(case=case, operations=operations)
