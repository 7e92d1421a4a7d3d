"""Every (from, to) pair of every state machine, against the edges its documentation
states. The edges are written out here, not read from ``runs.machines`` (the table under
test): a wrong extra edge there fails these tests as surely as a missing one. The states
are the models' choices, so a status the table forgets is a pair like any other.

Through ``runs.transitions`` on real rows, a documented edge appends exactly one chained
checkpoint; any other pair raises ``IllegalTransition`` and writes nothing."""

import itertools
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from runs.chain import verify_run_chain
from runs.errors import IllegalTransition, StaleVersion
from runs.machines import ALERT, OPERATION, REQUEST, RUN, Machine
from runs.models import Alert, HumanRequest, Operation, Run
from runs.transitions import (
    record_run_created,
    transition_alert,
    transition_operation,
    transition_request,
    transition_run,
)
from tests.conftest import AGENT

# Seed 002's table, plus what runs/machines.py adds explicitly (as the seed allows) so
# that an alert can halt a run wherever it is open (docs/concepts/rollback.md: "the run
# halts (waiting, reason reconciliation)"): queued → waiting, and waiting → waiting,
# which changes why it waits.
RUN_EDGES = {
    ("queued", "running"),
    ("queued", "cancelled"),
    ("queued", "waiting"),
    ("running", "waiting"),
    ("running", "completed"),
    ("running", "partial"),
    ("running", "failed"),
    ("running", "cancelled"),
    ("waiting", "queued"),
    ("waiting", "cancelled"),
    ("waiting", "failed"),
    ("waiting", "waiting"),
}
RUN_ENDS = {"completed", "partial", "failed", "cancelled"}

# PRODUCT.md and docs/concepts/operations.md; approved → expired is
# OVERSIGHT_APPROVAL_TTL_SECONDS ("an approval not executed within this expires"),
# approved → cancelled a withdrawal or a run's cancel before the claim, in_flight →
# cancelled the worker's cancel-flag check before anything fired.
OPERATION_EDGES = {
    ("proposed", "approved"),
    ("proposed", "rejected"),
    ("proposed", "expired"),
    ("proposed", "cancelled"),
    ("approved", "in_flight"),
    ("approved", "expired"),
    ("approved", "cancelled"),
    ("in_flight", "committed"),
    ("in_flight", "precondition_failed"),
    ("in_flight", "failed"),
    ("in_flight", "verify_failed"),
    ("in_flight", "cancelled"),
    ("verify_failed", "rolled_back"),
    ("verify_failed", "compensated"),
    ("verify_failed", "alerted"),
}
OPERATION_ENDS = {
    "committed",
    "precondition_failed",
    "failed",
    "rolled_back",
    "compensated",
    "alerted",
    "rejected",
    "expired",
    "cancelled",
}

# docs/agents/requests.md: open "until the request is answered, rejected, expired or
# withdrawn" (a withdrawn request is cancelled, as is an open one of a run that ends).
REQUEST_EDGES = {
    ("open", "answered"),
    ("open", "rejected"),
    ("open", "expired"),
    ("open", "cancelled"),
}
REQUEST_ENDS = {"answered", "rejected", "expired", "cancelled"}

# docs/guides/admins.md: an admin acknowledges an alert "so others know someone is on
# it", which is optional (the alerts page offers Resolve on an open alert), then resolves.
ALERT_EDGES = {("open", "acknowledged"), ("open", "resolved"), ("acknowledged", "resolved")}
ALERT_ENDS = {"resolved"}

MACHINES = [
    pytest.param(RUN, Run, RUN_EDGES, RUN_ENDS, id="run"),
    pytest.param(OPERATION, Operation, OPERATION_EDGES, OPERATION_ENDS, id="operation"),
    pytest.param(REQUEST, HumanRequest, REQUEST_EDGES, REQUEST_ENDS, id="request"),
    pytest.param(ALERT, Alert, ALERT_EDGES, ALERT_ENDS, id="alert"),
]


def pairs(model, *, same: bool = True) -> list:
    return [
        pytest.param(start, to, id=f"{start}->{to}")
        for start, to in itertools.product(model.Status.values, repeat=2)
        if same or start != to
    ]


def passes(machine: Machine, start: str, to: str) -> bool:
    try:
        machine.check(start, to)
    except IllegalTransition:
        return False
    return True


@pytest.mark.parametrize(("machine", "model", "edges", "ends"), MACHINES)
def test_the_machine_allows_exactly_the_documented_edges(machine, model, edges, ends):
    """Every pair, same status included: ``transition_operation`` never asks the table
    about one (it records an event), so a self-edge there shows only here."""
    states = model.Status.values
    allowed = {pair for pair in itertools.product(states, repeat=2) if passes(machine, *pair)}
    assert allowed == edges
    assert set(machine.edges) == set(states)


@pytest.mark.parametrize(("machine", "model", "edges", "ends"), MACHINES)
def test_only_the_documented_ends_are_terminal(machine, model, edges, ends):
    """What a finished run, operation or request is (``is_terminal``) comes from here."""
    assert machine.terminal == ends
    assert {status for status in model.Status.values if machine.is_terminal(status)} == ends


def row_values(row) -> dict:
    return type(row).objects.filter(pk=row.pk).values().get()


def snapshot(run: Run, row) -> tuple:
    return run.checkpoints.count(), row_values(run), row_values(row)


def assert_follows(edges: set, run: Run, row, to: str, move) -> None:
    """``move()`` asks for ``row`` (the run, or an operation, request or alert in it) to
    go to ``to``; check the outcome against the documented ``edges``."""
    start, before = row.status, snapshot(run, row)
    previous = run.checkpoints.order_by("-seq").first()
    if (start, to) not in edges:
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


def request_fields(status: str, user) -> dict:
    """What the database requires of an answered or rejected request: who, when, how
    (and, for a rejection, why)."""
    answer = {"answered_by": user, "answered_at": timezone.now()}
    if status == HumanRequest.Status.ANSWERED:
        return {**answer, "answer_kind": HumanRequest.AnswerKind.ANSWER, "answer": "Blue Heron"}
    if status == HumanRequest.Status.REJECTED:
        return {**answer, "answer_kind": HumanRequest.AnswerKind.REJECT, "comment": "not now"}
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


@pytest.mark.parametrize(("start", "to"), pairs(Run))
def test_run_moves_only_along_the_documented_edges(session, start, to):
    run = Run.objects.create(
        project=session.project, session=session, goal="g", status=start, **run_fields(start)
    )
    record_run_created(run=run, actor=AGENT)
    waiting = run_fields(to) if to == Run.Status.WAITING else {}
    assert_follows(
        RUN_EDGES, run, run, to, lambda: transition_run(run=run, to=to, actor=AGENT, **waiting)
    )


# The same status is an event on the operation, not a transition (see below).
@pytest.mark.parametrize(("start", "to"), pairs(Operation, same=False))
def test_operation_moves_only_along_the_documented_edges(run, start, to):
    operation = make_operation(run, status=start, **operation_fields(start))
    assert_follows(
        OPERATION_EDGES,
        run,
        operation,
        to,
        lambda: transition_operation(
            operation=operation, to=to, actor=AGENT, changes=operation_fields(to)
        ),
    )


@pytest.mark.parametrize(("start", "to"), pairs(HumanRequest))
def test_request_moves_only_along_the_documented_edges(run, start, to):
    user = run.session.owner
    request = HumanRequest.objects.create(
        run=run,
        project=run.project,
        prompt="What should the release be called?",
        kind=HumanRequest.Kind.QUESTION,
        status=start,
        expires_at=timezone.now() + timedelta(hours=1),
        **request_fields(start, user),
    )
    assert_follows(
        REQUEST_EDGES,
        run,
        request,
        to,
        lambda: transition_request(
            request=request, to=to, actor=AGENT, reason="checked", changes=request_fields(to, user)
        ),
    )


@pytest.mark.parametrize(("start", "to"), pairs(Alert))
def test_alert_moves_only_along_the_documented_edges(run, start, to):
    user = run.session.owner
    alert = Alert.objects.create(
        project=run.project, run=run, status=start, summary="disk full", **alert_fields(start, user)
    )
    assert_follows(
        ALERT_EDGES,
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


@pytest.mark.parametrize("end", sorted(RUN_ENDS))
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
