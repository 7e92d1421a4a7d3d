"""Requeuing an operation after a fix (#37, item 6): an operation whose effect did not
happen is proposed again in its run by an operator who says what was fixed; reviewers
decide on it again (never that operator), a worker carries it out once, and the one
requeued stays as it ended. From the command line and from the operation's page."""

from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from runs.actors import Actor
from runs.api.schemas import OperationOut
from runs.chain import verify_all_chains
from runs.errors import DecisionRefused, IllegalTransition, InvalidInput, NotPermitted
from runs.models import (
    Account,
    ApprovalPolicy,
    Checkpoint,
    Decision,
    LedgerEntry,
    Message,
    Operation,
    Role,
)
from runs.queue import next_waiting
from runs.services.requeues import requeue_operation
from runs.services.runs import cancel_run
from tests.conftest import make_user
from tests.helpers import decide_on, drained, sign_in

Status = Operation.Status


@pytest.fixture
def operator(project):
    """An admin of the project who also decides on its operations."""
    return make_user("ops", project, Role.ADMIN, Role.REVIEWER)


@pytest.fixture
def short_of_funds(approved) -> Operation:
    """A transfer approved while A held 5,000.00, not made: A fell to 500.00 before a
    worker took it (its precondition keeps 1,000.00 in A)."""
    operation = approved("ledger")
    Account.objects.filter(name="A").update(balance=Decimal("500.00"))
    operation = drained(operation)
    assert operation.status == Status.PRECONDITION_FAILED
    return operation


def topped_up() -> None:
    Account.objects.filter(name="A").update(balance=Decimal("5000.00"))


def test_the_requeue_is_decided_again_by_someone_else_and_moves_the_money_once(
    short_of_funds, operator, reviewer, run
):
    topped_up()
    requeue, new = requeue_operation(operation=short_of_funds, user=operator, reason="A topped up")

    assert new and requeue.status == Status.PROPOSED
    assert (requeue.action, requeue.arguments) == (short_of_funds.action, short_of_funds.arguments)
    with pytest.raises(DecisionRefused, match="you requeued this"):
        decide_on(requeue, operator)
    assert next_waiting(operator, short_of_funds) is None  # Not in the operator's queue either.
    decide_on(requeue, reviewer)

    assert drained(requeue).status == Status.COMMITTED
    assert LedgerEntry.objects.count() == 1
    assert Account.objects.get(name="A").balance == Decimal("4900.00")
    short_of_funds.refresh_from_db()
    assert short_of_funds.status == Status.PRECONDITION_FAILED  # As the agent was told.
    told = Message.objects.filter(run=run, kind="user", author="ops").get().payload["text"]
    assert told == (
        f"Operation {short_of_funds.pk} (ledger.transfer) was requeued by ops as operation "
        f"{requeue.pk}: A topped up"
    )
    proposed = Checkpoint.objects.get(operation=requeue, event="operation.proposed")
    assert proposed.actor_label == "ops"
    assert proposed.state["proposal"]["requeue"] == {
        "of": short_of_funds.pk,
        "by": "ops",
        "reason": "A topped up",
    }
    assert OperationOut.of(requeue).requeue_of == short_of_funds.pk  # What the agent reads.
    assert all(report.ok for report in verify_all_chains())


def test_requeued_twice_is_one_requeue_and_a_requeue_that_failed_is_requeued_in_turn(
    short_of_funds, operator, reviewer
):
    first, _ = requeue_operation(operation=short_of_funds, user=operator, reason="A topped up")
    again, new = requeue_operation(operation=short_of_funds, user=operator, reason="really")
    assert (again.pk, new) == (first.pk, False)

    decide_on(first, reviewer)
    assert drained(first).status == Status.PRECONDITION_FAILED  # Nobody topped A up.
    topped_up()
    second, new = requeue_operation(operation=first, user=operator, reason="now A is topped up")
    assert new and second.requeue_of == first
    decide_on(second, reviewer)

    assert drained(second).status == Status.COMMITTED
    assert LedgerEntry.objects.count() == 1
    with pytest.raises(IllegalTransition, match="is committed: only an operation whose effect"):
        requeue_operation(operation=second, user=operator, reason="once more")


def test_only_an_admin_requeues_only_what_did_not_happen_in_a_run_still_open(
    short_of_funds, approved, operator, reviewer, run
):
    with pytest.raises(NotPermitted):
        requeue_operation(operation=short_of_funds, user=reviewer, reason="A topped up")
    with pytest.raises(IllegalTransition, match="is approved"):
        requeue_operation(operation=approved("ledger"), user=operator, reason="twice")
    cancel_run(run=run, actor=Actor.of_user(operator), reason="stop")
    with pytest.raises(IllegalTransition, match=f"run {run.pk} is cancelled; it accepts nothing"):
        requeue_operation(operation=short_of_funds, user=operator, reason="A topped up")
    assert not Operation.objects.filter(requeue_of__isnull=False).exists()


def test_the_command_requeues_as_the_operator_and_refuses_in_one_line(
    short_of_funds, operator, reviewer
):
    out = StringIO()
    call_command(
        "requeue_operation",
        str(short_of_funds.pk),
        "--reason",
        "A topped up",
        "--as",
        "ops",
        stdout=out,
    )
    requeue = Operation.objects.get(requeue_of=short_of_funds)
    assert out.getvalue() == (
        f"operation {short_of_funds.pk} requeued as operation {requeue.pk} (proposed) by ops\n"
    )
    with pytest.raises(CommandError, match="may not requeue operation"):
        call_command(
            "requeue_operation", str(short_of_funds.pk), "--reason", "x", "--as", "reviewer"
        )
    with pytest.raises(CommandError, match="reason: say what was fixed"):
        call_command("requeue_operation", str(short_of_funds.pk), "--reason", " ", "--as", "ops")


def test_from_the_page_an_admin_requeues_and_both_pages_point_to_each_other(
    client, short_of_funds, operator
):
    sign_in(client, "ops", "pw")
    page = client.get(reverse("operation", args=[short_of_funds.pk])).content.decode()
    assert reverse("operation-requeue", args=[short_of_funds.pk]) in page

    refused = client.post(reverse("operation-requeue", args=[short_of_funds.pk]), {"reason": ""})
    assert refused.status_code == 400
    assert not Operation.objects.filter(requeue_of=short_of_funds).exists()

    done = client.post(
        reverse("operation-requeue", args=[short_of_funds.pk]), {"reason": "A <b>topped</b> up"}
    )
    requeue = Operation.objects.get(requeue_of=short_of_funds)
    assert done.url == reverse("operation", args=[requeue.pk])
    shown = client.get(done.url).content.decode()
    assert f'A requeue of <a href="{reverse("operation", args=[short_of_funds.pk])}">' in shown
    assert "A &lt;b&gt;topped&lt;/b&gt; up" in shown
    assert "You requeued this, so someone else must decide on it (four eyes)." in shown
    original = client.get(reverse("operation", args=[short_of_funds.pk])).content.decode()
    assert f'Requeued as <a href="{reverse("operation", args=[requeue.pk])}">' in original


def test_a_reviewer_is_not_offered_a_requeue(client, short_of_funds, reviewer):
    sign_in(client, "reviewer", "pw")
    page = client.get(reverse("operation", args=[short_of_funds.pk])).content.decode()
    assert reverse("operation-requeue", args=[short_of_funds.pk]) not in page
    assert client.get(reverse("operation-requeue", args=[short_of_funds.pk])).status_code == 403


def test_once_the_agent_proposed_the_same_again_it_is_not_requeued(
    short_of_funds, propose, operator, reviewer, client
):
    """Two approvals of one transfer would move the money twice: the reviewer decides
    on the agent's own retry instead."""
    topped_up()
    retry = propose("agent-retry", arguments=short_of_funds.arguments)
    decide_on(retry, reviewer)
    assert drained(retry).status == Status.COMMITTED

    with pytest.raises(
        IllegalTransition, match=f"as operation {retry.pk} \\(committed\\): a requeue"
    ):
        requeue_operation(operation=short_of_funds, user=operator, reason="A topped up")
    assert LedgerEntry.objects.count() == 1
    sign_in(client, "ops", "pw")
    page = client.get(reverse("operation", args=[short_of_funds.pk])).text
    assert reverse("operation-requeue", args=[short_of_funds.pk]) not in page


def test_no_agent_may_name_a_call_as_a_requeue(short_of_funds, propose):
    with pytest.raises(InvalidInput, match="call_id: requeue-of-… names are Oversight's"):
        propose(f"requeue-of-{short_of_funds.pk}", arguments=short_of_funds.arguments)


def test_a_requeue_waits_for_a_person_even_where_the_policy_approves_alone(
    short_of_funds, project, operator
):
    ApprovalPolicy.objects.create(project=project, action="ledger.transfer", approvals_required=0)

    requeue, _ = requeue_operation(operation=short_of_funds, user=operator, reason="A topped up")

    assert (requeue.status, requeue.required_approvals) == (Status.PROPOSED, 1)
    assert requeue.approval_rule == "an operator's requeue: one person, whatever the policy"


def test_the_agent_s_retry_of_an_edited_operation_counts_as_the_same(
    approved, propose, reviewer, operator
):
    """A reviewer's edit changed the original's arguments; the agent retries what it
    first proposed: still one transfer."""
    first = propose(
        "pay",
        arguments={"from": "A", "to": "B", "amount": "100.00", "require_balance_above": "1000.00"},
    )
    decide_on(first, reviewer, Decision.Kind.EDIT, arguments={**first.arguments, "amount": "90.00"})
    Account.objects.filter(name="A").update(balance=Decimal("500.00"))
    assert drained(first).status == Status.PRECONDITION_FAILED
    topped_up()
    retry = propose("agent-retry", arguments=first.proposed_arguments)
    decide_on(retry, reviewer)
    assert drained(retry).status == Status.COMMITTED

    with pytest.raises(IllegalTransition, match=f"as operation {retry.pk}"):
        requeue_operation(operation=first, user=operator, reason="A topped up")
    assert LedgerEntry.objects.count() == 1
