"""An agent operation whose token will never act again (#38, item 5): only its
session's token may claim it, so proposed or approved it would wait for ever. It is
withdrawn, with the reason, when the token is revoked on its page, and by a worker's
housekeeping when its owner is deactivated; an owner who left the project may come
back, so their agent's operations wait. A server operation of the same agent goes on:
a worker carries it out as reviewers decide."""

import pytest
from django.urls import reverse

from runs.engine.worker import Worker
from runs.models import Operation, Run
from runs.services.runs import open_session, start_run
from runs.services.tokens import ORPHANED_REASON
from tests.conftest import AGENT
from tests.helpers import decide_on, drained, sign_in

Status = Operation.Status


@pytest.fixture
def agent_ops(propose, reviewer, accounts):
    """Two agent operations of the test agent, one approved and one proposed, and an
    approved transfer that a worker carries out."""
    approved = propose("call-1", action="crm.update", arguments={"id": 7}, rollback_kind="none")
    decide_on(approved, reviewer)
    waiting = propose("call-2", action="crm.update", arguments={"id": 8}, rollback_kind="none")
    transfer = propose("call-3")
    decide_on(transfer, reviewer)
    return approved, waiting, transfer


def test_revoking_the_token_withdraws_what_only_its_agent_could_carry_out(
    client, agent_ops, admin_user, agent_token, run
):
    approved, waiting, transfer = agent_ops
    assert approved.executor == waiting.executor == Operation.Executor.AGENT
    sign_in(client, "admin", "pw")

    page = client.post(
        reverse("token-revoke", args=[agent_token.project.slug, agent_token.pk]), follow=True
    )

    assert "and 2 operation(s) only it could carry out are withdrawn" in page.text
    for operation in (approved, waiting):
        operation.refresh_from_db()
        assert (operation.status, operation.status_reason) == (Status.CANCELLED, ORPHANED_REASON)
        assert operation.result == {"cancelled": ORPHANED_REASON}
    assert drained(transfer).status == Status.COMMITTED
    run.refresh_from_db()
    assert run.status != Run.Status.WAITING  # Nothing is left to decide or carry out.


def test_a_worker_withdraws_them_once_the_owner_is_deactivated(agent_ops, owner):
    approved, waiting, _ = agent_ops
    owner.is_active = False
    owner.save(update_fields=["is_active"])

    Worker("w1").housekeeping()  # Its first round is a minutely one.

    assert set(
        Operation.objects.filter(pk__in=[approved.pk, waiting.pk]).values_list("status", flat=True)
    ) == {Status.CANCELLED}


def test_an_owner_who_left_the_project_may_come_back_so_they_wait(agent_ops, project, owner):
    """As when a role from single sign-on lapses: the token acts again once they are
    back, and reviewers may cancel meanwhile."""
    approved, waiting, _ = agent_ops
    project.memberships.filter(user=owner).delete()

    Worker("w1").housekeeping()

    approved.refresh_from_db()
    waiting.refresh_from_db()
    assert (approved.status, waiting.status) == (Status.APPROVED, Status.PROPOSED)


def test_a_token_that_acts_keeps_its_operations(agent_ops):
    approved, waiting, _ = agent_ops

    Worker("w1").housekeeping()

    approved.refresh_from_db()
    waiting.refresh_from_db()
    assert (approved.status, waiting.status) == (Status.APPROVED, Status.PROPOSED)


def test_a_session_opened_without_a_token_keeps_its_operations(project, owner, propose):
    """The demo's and older sessions name no token: there is none that stopped acting."""
    session = open_session(project=project, owner=owner, agent="seeded", title="Seeded")
    run = start_run(session=session, goal="Check the status page", actor=AGENT)
    waiting = propose(
        "call-1", target=run, action="status.check", arguments={}, rollback_kind="none"
    )

    Worker("w1").housekeeping()

    waiting.refresh_from_db()
    assert waiting.status == Status.PROPOSED
