"""cancel_run: an admin stops a run and everything it has not yet executed."""

import pytest

from runs.actors import Actor
from runs.errors import InvalidInput, NotPermitted, RunClosed
from runs.models import Checkpoint, Operation, Run
from runs.payloads import MessageKind
from runs.services.runs import append_message, cancel_run, finish_run
from tests.conftest import AGENT
from tests.helpers import decide_on, refused, stored

REASON = "supplier under investigation"


@pytest.fixture
def cancel(run, admin_user):
    def _cancel(user=admin_user, reason: str = REASON) -> Run:
        return cancel_run(run=run, actor=Actor.of_user(user), reason=reason)

    return _cancel


def test_cancel_stops_the_run_and_every_operation_not_yet_executed(
    run, propose, reviewer, admin_user, cancel
):
    proposed, approved = propose("call-1"), propose("call-2")
    decide_on(approved, reviewer)
    before = Run.objects.get(pk=run.pk).version

    cancelled = cancel()

    assert cancelled.status == Run.Status.CANCELLED
    assert cancelled.cancel_requested
    assert cancelled.outcome == REASON
    assert (
        list(
            Operation.objects.filter(pk__in=[proposed.pk, approved.pk]).values_list(
                "status", "status_reason"
            )
        )
        == [(Operation.Status.CANCELLED, REASON)] * 2
    )
    checkpoints = Checkpoint.objects.filter(run=run, seq__gt=before).order_by("seq")
    assert [
        (c.event, c.from_status, c.to_status, c.operation_id, c.actor_user) for c in checkpoints
    ] == [
        ("operation.status", "proposed", "cancelled", proposed.pk, admin_user),
        ("operation.status", "approved", "cancelled", approved.pk, admin_user),
        ("run.status", "waiting", "cancelled", None, admin_user),
    ]


def test_decision_on_a_cancelled_run_is_refused(propose, reviewer, cancel):
    op = propose()
    cancel()

    with refused(RunClosed):
        decide_on(op, reviewer)


def test_agent_message_on_a_cancelled_run_is_refused(run, cancel):
    cancel()

    with refused(RunClosed):
        append_message(run=run, kind=MessageKind.AGENT, payload={"text": "done"}, actor=AGENT)


def test_proposal_on_a_cancelled_run_is_refused(propose, cancel):
    cancel()

    with refused(RunClosed):
        propose("call-after-cancel")


@pytest.mark.parametrize("reason", ["", "   "])
def test_cancel_needs_a_reason(cancel, reason):
    with refused(InvalidInput):
        cancel(reason=reason)


@pytest.mark.parametrize("who", ["reviewer", "auditor", "outsider"])
def test_users_without_the_cancel_role_here_cannot_cancel(request, propose, cancel, who):
    propose()

    with refused(NotPermitted):
        cancel(user=request.getfixturevalue(who))


def test_cancelling_twice_changes_nothing(cancel):
    cancel()
    before = stored()

    again = cancel(reason="another reason")

    assert again.status == Run.Status.CANCELLED
    assert again.outcome == REASON
    assert stored() == before


def test_cancelling_a_completed_run_is_refused(run, cancel):
    finish_run(run=run, status=Run.Status.COMPLETED, actor=AGENT)

    with refused(RunClosed):
        cancel()
