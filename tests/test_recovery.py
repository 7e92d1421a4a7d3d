"""recovery_report: which of the three recovery cases a run is in."""

import pytest

from runs.actors import Actor
from runs.models import Decision, Operation
from runs.recovery import RecoveryCase, recovery_report
from runs.transitions import transition_operation
from tests.helpers import decide_on

WORKER = Actor.worker("test-worker")


def approve(op: Operation, reviewer) -> Operation:
    decide_on(op, reviewer)
    return op


def reject(op: Operation, reviewer) -> Operation:
    decide_on(op, reviewer, Decision.Kind.REJECT, comment="not this one")
    return op


def commit(op: Operation, reviewer) -> Operation:
    """Approve, then take the worker's path: in flight, then committed."""
    approve(op, reviewer)
    for status in (Operation.Status.IN_FLIGHT, Operation.Status.COMMITTED):
        transition_operation(operation=op, to=status, actor=WORKER)
    return op


def leave_proposed(op: Operation, reviewer) -> Operation:
    return op


def test_run_without_operations_has_no_decision(run):
    report = recovery_report(run)

    assert (report.case, report.operations) == (RecoveryCase.NO_DECISION, [])
    assert report.guidance


@pytest.mark.parametrize(
    ("settle", "case"),
    [
        (leave_proposed, RecoveryCase.NO_DECISION),
        (approve, RecoveryCase.DECISION_NO_RESULT),
        (commit, RecoveryCase.RESULT_AND_CHECKPOINT),
        (reject, RecoveryCase.RESULT_AND_CHECKPOINT),
    ],
    ids=["proposed", "approved", "committed", "rejected"],
)
def test_case_follows_the_operation(run, propose, reviewer, settle, case):
    op = settle(propose(), reviewer)

    report = recovery_report(run)

    assert report.case == case
    assert report.operations == [
        {"id": op.pk, "call_id": op.call_id, "status": op.status, "case": case.value}
    ]


@pytest.mark.parametrize(
    ("settles", "case"),
    [
        ((reject, leave_proposed, approve), RecoveryCase.DECISION_NO_RESULT),
        ((commit, leave_proposed), RecoveryCase.NO_DECISION),
    ],
    ids=["uncertain-effect-first", "then-missing-decision"],
)
def test_mixed_run_takes_its_most_delicate_case(run, propose, reviewer, settles, case):
    for number, settle in enumerate(settles):
        settle(propose(f"call-{number}"), reviewer)

    assert recovery_report(run).case == case
