"""Every (from, to) pair of every machine in ``runs.machines``: an edge in the table
appends exactly one chained checkpoint; anything else raises and writes nothing."""

import itertools
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from runs.chain import verify_run_chain
from runs.errors import IllegalTransition, StaleVersion
from runs.machines import ALERT, OPERATION, RUN, Machine
from runs.models import Alert, Operation, Run
from runs.transitions import (
    record_run_created,
    transition_alert,
    transition_operation,
    transition_run,
)
from tests.conftest import AGENT


def pairs(machine: Machine, *, same: bool = True) -> list:
    return [
        pytest.param(start, to, id=f"{start}->{to}")
        for start, to in itertools.product(machine.edges, repeat=2)
        if same or start != to
    ]


def row_values(row) -> dict:
    return type(row).objects.filter(pk=row.pk).values().get()


def snapshot(run: Run, row) -> tuple:
    return run.checkpoints.count(), row_values(run), row_values(row)


def assert_follows(machine: Machine, run: Run, row, to: str, move) -> None:
    """``move()`` asks for ``row`` (the run, or an operation or alert in it) to go to
    ``to``; check the outcome against ``machine``'s table."""
    start, before = row.status, snapshot(run, row)
    previous = run.checkpoints.order_by("-seq").first()
    if to not in machine.edges[start]:
        with pytest.raises(IllegalTransition):
            move()
        assert snapshot(run, row) == before
        return
    checkpoint = move()
    run.refresh_from_db()
    assert list(run.checkpoints.filter(seq__gt=previous.seq)) == [checkpoint]
    assert (checkpoint.from_status, checkpoint.to_status) == (start, to)
    assert checkpoint.seq == run.version == previous.seq + 1
    assert checkpoint.prev_hash == previous.hash
    assert verify_run_chain(run) is None
    assert row_values(row)["status"] == to


def run_fields(status: str) -> dict:
    if status == Run.Status.WAITING:
        return {"reason": Run.Reason.APPROVAL, "unblock": "a reviewer's decision"}
    return {"cancel_requested": status == Run.Status.CANCELLED}


def operation_fields(status: str) -> dict:
    if status == Operation.Status.APPROVED:
        return {"approval_expires_at": timezone.now() + timedelta(hours=1)}
    return {}


def alert_fields(status: str, user) -> dict:
    if status == Alert.Status.RESOLVED:
        return {"resolved_by": user, "resolution_note": "restored from backup"}
    return {}


def make_operation(run: Run, **fields) -> Operation:
    return Operation.objects.create(
        run=run,
        project=run.project,
        call_id="call-1",
        action="ledger.transfer",
        proposed_arguments={},
        arguments={},
        arguments_hash="0" * 64,
        idempotency_key="key-1",
        rollback_kind=Operation.RollbackKind.COMPENSATING,
        required_approvals=fields.pop("required_approvals", 1),
        base_version=run.version,
        expires_at=timezone.now() + timedelta(hours=1),
        **fields,
    )


@pytest.mark.parametrize(("start", "to"), pairs(RUN))
def test_run_moves_only_along_the_table(session, start, to):
    run = Run.objects.create(
        project=session.project, session=session, goal="g", status=start, **run_fields(start)
    )
    record_run_created(run=run, actor=AGENT)
    waiting = run_fields(to) if to == Run.Status.WAITING else {}
    assert_follows(
        RUN, run, run, to, lambda: transition_run(run=run, to=to, actor=AGENT, **waiting)
    )


@pytest.mark.parametrize(("start", "to"), pairs(OPERATION, same=False))
def test_operation_moves_only_along_the_table(run, start, to):
    operation = make_operation(run, status=start, **operation_fields(start))
    assert_follows(
        OPERATION,
        run,
        operation,
        to,
        lambda: transition_operation(
            operation=operation, to=to, actor=AGENT, changes=operation_fields(to)
        ),
    )


@pytest.mark.parametrize(("start", "to"), pairs(ALERT))
def test_alert_moves_only_along_the_table(run, start, to):
    user = run.session.owner
    alert = Alert.objects.create(
        project=run.project, run=run, status=start, summary="disk full", **alert_fields(start, user)
    )
    assert_follows(
        ALERT,
        run,
        alert,
        to,
        lambda: transition_alert(
            alert=alert, to=to, actor=AGENT, reason="checked", changes=alert_fields(to, user)
        ),
    )


def test_operation_event_without_status_change_is_checkpointed(run):
    operation = make_operation(run, required_approvals=2)
    checkpoint = transition_operation(
        operation=operation, to="proposed", actor=AGENT, event="operation.approval"
    )
    run.refresh_from_db()
    assert (checkpoint.event, checkpoint.from_status, checkpoint.to_status) == (
        "operation.approval",
        "proposed",
        "proposed",
    )
    assert checkpoint.seq == run.version
    assert row_values(operation)["status"] == "proposed"


RUN_ENDS = {"completed", "partial", "failed", "cancelled"}
OPERATION_ENDS = {"committed", "precondition_failed", "failed", "rolled_back", "compensated"}
OPERATION_ENDS |= {"alerted"}
OPERATION_ENDS |= {"rejected", "expired", "cancelled"}


@pytest.mark.parametrize(
    ("machine", "terminal"),
    [
        pytest.param(RUN, RUN_ENDS, id="run"),
        pytest.param(OPERATION, OPERATION_ENDS, id="operation"),
        pytest.param(ALERT, {"resolved"}, id="alert"),
    ],
)
def test_terminal_statuses_have_no_outgoing_edge(machine, terminal):
    assert {status for status, targets in machine.edges.items() if not targets} == terminal
    assert machine.terminal == terminal


@pytest.mark.parametrize("end", sorted(RUN.terminal))
def test_a_finished_run_never_runs_again(run, end):
    transition_run(run=run, to=end, actor=AGENT, outcome="done")
    for target in (Run.Status.RUNNING, Run.Status.QUEUED):
        before = snapshot(run, run)
        with pytest.raises(IllegalTransition):
            transition_run(run=run, to=target, actor=AGENT)
        assert snapshot(run, run) == before


def test_a_decision_on_an_old_version_of_the_run_is_refused(run):
    before = snapshot(run, run)
    with pytest.raises(StaleVersion):
        transition_run(
            run=run,
            to=Run.Status.WAITING,
            actor=AGENT,
            expected_version=run.version - 1,
            **run_fields(Run.Status.WAITING),
        )
    assert snapshot(run, run) == before


def test_checkpoints_are_append_only(run):
    checkpoint = run.checkpoints.order_by("seq").first()
    before = row_values(checkpoint)
    checkpoint.reason = "rewritten history"
    with pytest.raises(ValidationError):
        checkpoint.save()
    assert row_values(checkpoint) == before
