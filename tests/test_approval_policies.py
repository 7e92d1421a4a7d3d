"""Approval policies as data: a rule sets the minimum risk and the approvals, optionally
only when an argument passes a test; the agent can raise its risk, never lower it; a
reviewer's edit is judged by the same rules; the page and the API say which rule set
the count."""

from datetime import timedelta

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from runs.errors import DecisionRefused
from runs.models import ApprovalPolicy, Checkpoint, Operation
from tests.api_helpers import agent_proposal, proposal
from tests.helpers import decide_on, stored

pytest_plugins = ["tests.api_helpers"]

AUTO, ONE, TWO = ApprovalPolicy.Approvals
LOW, MEDIUM, HIGH = Operation.Risk
BIG_TRANSFER = "acme / ledger.transfer when amount > 1000: two approvers, min risk high"


def rule(project, action="ledger.transfer", approvals=ONE, **fields) -> ApprovalPolicy:
    return ApprovalPolicy.objects.create(
        project=project, action=action, approvals_required=approvals, **fields
    )


def above(amount, **fields) -> dict:
    return {"when_argument": "amount", "when_operator": "gt", "when_value": amount, **fields}


def transfer(amount) -> dict:
    return {"from": "A", "to": "B", "amount": amount}


@pytest.fixture
def big_transfers(project):
    """Transfers are auto-approved, except above 1000: two people, and high risk."""
    rule(project, approvals=AUTO)
    return rule(project, approvals=TWO, min_risk=HIGH, **above(1000))


# --- the rules set the risk and the count ----------------------------------------------------


def test_a_minimum_risk_overrides_the_agents_low_risk(project, propose):
    rule(project, min_risk=HIGH)

    op = propose(risk=LOW)

    assert (op.proposed_risk, op.risk, op.required_approvals) == (LOW, HIGH, 2)
    assert op.approval_rule == (
        "high risk: two people; risk raised to high by "
        "acme / ledger.transfer: one approver, min risk high"
    )
    assert op.status == Operation.Status.PROPOSED


@pytest.mark.parametrize("amount", [5000, "1000.01", 1000.5], ids=["number", "text", "float"])
def test_a_transfer_above_the_amount_needs_two_people(big_transfers, propose, amount):
    op = propose(risk=LOW, arguments=transfer(amount))

    assert (op.risk, op.required_approvals, op.approval_rule) == (HIGH, 2, BIG_TRANSFER)
    assert op.status == Operation.Status.PROPOSED
    assert not op.decisions.exists()


@pytest.mark.parametrize("amount", [1000, "999.99", "1000.00"])
def test_a_transfer_up_to_the_amount_follows_the_unconditional_rule(big_transfers, propose, amount):
    op = propose(risk=LOW, arguments=transfer(amount))

    assert (op.risk, op.required_approvals, op.status) == (LOW, 0, Operation.Status.APPROVED)
    assert op.approval_rule == "acme / ledger.transfer: auto-approve"
    assert op.decisions.get().policy == "acme / ledger.transfer: auto-approve"


def test_the_agent_can_raise_its_risk_above_the_rules(project, propose):
    rule(project, approvals=AUTO, min_risk=MEDIUM)

    op = propose(risk=HIGH)

    assert (op.proposed_risk, op.risk, op.required_approvals) == (HIGH, HIGH, 2)
    assert op.approval_rule == "high risk: two people"
    assert op.status == Operation.Status.PROPOSED


def test_a_rule_raising_the_risk_to_medium_is_named(project, propose):
    rule(project, approvals=ONE, min_risk=MEDIUM)

    op = propose(risk=LOW)

    assert (op.risk, op.required_approvals) == (MEDIUM, 1)
    assert op.approval_rule == "acme / ledger.transfer: one approver, min risk medium"


def test_without_any_rule_one_person_approves(propose):
    op = propose(risk=LOW)

    assert (op.risk, op.required_approvals) == (LOW, 1)
    assert op.approval_rule == "no policy rule applies: one approver"


def test_an_auto_approving_rule_never_wins_over_a_stricter_one(project, propose):
    rule(project, approvals=ONE)
    rule(project, approvals=AUTO, when_argument="amount", when_operator="lt", when_value=500)

    op = propose(arguments=transfer(100))

    assert (op.required_approvals, op.status) == (1, Operation.Status.PROPOSED)
    assert op.approval_rule == "acme / ledger.transfer: one approver"


def test_the_project_defaults_conditions_bind_an_action_with_its_own_rule(project, propose):
    rule(project, approvals=AUTO)
    rule(project, action="", approvals=TWO, **above(1000))

    op = propose(arguments=transfer(5000))

    assert (op.required_approvals, op.status) == (2, Operation.Status.PROPOSED)
    assert op.approval_rule == "acme / any action when amount > 1000: two approvers"


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        ({"amt": 5000}, "amount missing"),
        ({"amount": "lots"}, "amount not comparable"),
        ({"amount": [5000]}, "amount not comparable"),
        ({"amount": True}, "amount not comparable"),
        ({"amount": "NaN"}, "amount not comparable"),
    ],
    ids=["missing", "text", "list", "boolean", "nan"],
)
def test_a_rule_whose_argument_cannot_be_tested_applies(project, propose, arguments, why):
    rule(project, action="payments.send", approvals=AUTO)
    rule(project, action="payments.send", approvals=TWO, **above(1000))

    op = propose(action="payments.send", arguments=arguments, rollback_kind="none")

    assert op.required_approvals == 2
    assert op.approval_rule == f"acme / payments.send when amount > 1000 ({why}): two approvers"


def test_a_rule_that_cannot_be_tested_never_auto_approves(project, propose):
    below = {"when_argument": "amount", "when_operator": "lt", "when_value": 100}
    rule(project, action="payments.send", approvals=AUTO, **below)

    op = propose(action="payments.send", arguments={"sum": 50}, rollback_kind="none")

    assert (op.required_approvals, op.status) == (1, Operation.Status.PROPOSED)
    assert op.approval_rule == (
        "acme / payments.send when amount < 100 (amount missing): one approver"
    )


@pytest.mark.parametrize(
    ("to", "expected"),
    [({"bank": "x", "account": "payroll"}, 2), ({"account": "rent"}, 1), ("payroll", 2)],
    ids=["equal", "other", "not-an-object"],
)
def test_a_rule_on_a_nested_argument(project, propose, to, expected):
    rule(
        project,
        action="payments.send",
        approvals=TWO,
        when_argument="to.account",
        when_operator="eq",
        when_value="payroll",
    )

    op = propose(action="payments.send", arguments={"to": to}, rollback_kind="none")

    assert op.required_approvals == expected


def test_the_decision_timeout_comes_from_the_rule_that_set_the_count(project, propose):
    now = timezone.now()
    rule(project, approvals=TWO, decision_timeout=timedelta(minutes=10), **above(1000))
    rule(project, approvals=ONE, decision_timeout=timedelta(hours=2))
    rule(project, action="payments.send", approvals=TWO, **above(1000))

    big = propose("big", arguments=transfer(5000), now=now)
    small = propose("small", arguments=transfer(10), now=now)
    other = propose("other", action="payments.send", arguments={}, rollback_kind="none", now=now)

    assert big.expires_at - now == timedelta(minutes=10)
    assert small.expires_at - now == timedelta(hours=2)
    assert other.expires_at - now == settings.OVERSIGHT_DECISION_TIMEOUT


def test_the_approval_ttl_comes_from_the_rule_that_set_the_count(
    project, propose, reviewer, reviewer2
):
    rule(project, approvals=TWO, approval_ttl=timedelta(minutes=5), **above(1000))
    rule(project, approvals=ONE, approval_ttl=timedelta(minutes=30))

    op = propose(arguments=transfer(5000))
    decide_on(op, reviewer)
    decide_on(op, reviewer2)

    assert op.status == Operation.Status.APPROVED
    assert op.approval_expires_at - op.approved_at == timedelta(minutes=5)


# --- a reviewer's edit is judged by the same rules --------------------------------------------


@pytest.fixture
def small_transfer(project, propose) -> Operation:
    rule(project, approvals=ONE)
    rule(project, approvals=TWO, min_risk=HIGH, **above(1000))
    op = propose(risk=LOW, arguments=transfer(10))
    assert op.required_approvals == 1
    return op


def test_an_edit_above_the_amount_needs_a_second_person(run, small_transfer, reviewer, reviewer2):
    op = small_transfer

    decide_on(op, reviewer, "edit", arguments=transfer(10_000), comment="the real invoice")

    assert op.status == Operation.Status.PROPOSED
    assert (op.risk, op.required_approvals, op.approval_rule) == (HIGH, 2, BIG_TRANSFER)
    edit = Checkpoint.objects.filter(operation=op).latest("seq")
    assert edit.reason == "1 of 2 approvals for the edited arguments"
    assert edit.state["requirement"]["required_approvals"] == 2
    run.refresh_from_db()
    assert run.status == "waiting"

    decide_on(op, reviewer2)

    assert op.status == Operation.Status.APPROVED
    assert op.arguments == transfer(10_000)


def test_the_editor_cannot_give_the_second_approval_of_their_edit(small_transfer, reviewer):
    decide_on(small_transfer, reviewer, "edit", arguments=transfer(10_000))
    before = stored()

    with pytest.raises(DecisionRefused, match="already approved"):
        decide_on(small_transfer, reviewer)

    assert stored() == before
    assert small_transfer.status == Operation.Status.PROPOSED


def test_an_edit_never_lowers_the_count(project, propose, reviewer, reviewer2):
    rule(project, approvals=ONE)
    rule(project, approvals=TWO, min_risk=HIGH, **above(1000))
    op = propose(risk=LOW, arguments=transfer(5000))

    decide_on(op, reviewer, "edit", arguments=transfer(10))

    assert op.status == Operation.Status.PROPOSED
    assert (op.risk, op.required_approvals, op.approval_rule) == (HIGH, 2, BIG_TRANSFER)


def test_an_edit_up_and_back_down_keeps_the_stricter_rule(small_transfer, reviewer, reviewer2):
    decide_on(small_transfer, reviewer, "edit", arguments=transfer(10_000))
    decide_on(small_transfer, reviewer2, "edit", arguments=transfer(20))

    assert small_transfer.status == Operation.Status.PROPOSED
    assert small_transfer.required_approvals == 2


def test_an_edit_within_the_rule_approves_as_before(small_transfer, reviewer):
    decide_on(small_transfer, reviewer, "edit", arguments=transfer(500))

    assert small_transfer.status == Operation.Status.APPROVED
    assert (small_transfer.risk, small_transfer.required_approvals) == (LOW, 1)


# --- the page and the API say which rule set the count ----------------------------------------


def test_the_operation_page_shows_the_rule_and_the_raised_risk(
    client, big_transfers, propose, reviewer
):
    op = propose(risk=LOW, arguments=transfer(5000))
    client.force_login(reviewer)

    html = client.get(reverse("operation", args=[op.pk])).content.decode()

    assert f"Set by</dt><dd>{BIG_TRANSFER.replace('>', '&gt;')}</dd>" in html
    assert (
        "proposed as low, raised to high by "
        "acme / ledger.transfer when amount &gt; 1000: two approvers, min risk high"
    ) in html


def test_the_operation_page_names_the_rule_that_raised_the_risk_apart(
    client, project, propose, reviewer
):
    rule(project, approvals=ONE, min_risk=HIGH)
    op = propose(risk=LOW)
    client.force_login(reviewer)

    html = client.get(reverse("operation", args=[op.pk])).content.decode()

    assert "Set by</dt><dd>high risk: two people</dd>" in html
    assert (
        "proposed as low, raised to high by acme / ledger.transfer: one approver, min risk high"
    ) in html


def test_the_operation_page_says_nothing_of_raising_when_the_agents_risk_stood(
    client, project, propose, reviewer
):
    op = propose(risk=MEDIUM)
    client.force_login(reviewer)

    html = client.get(reverse("operation", args=[op.pk])).content.decode()

    assert "Set by</dt><dd>no policy rule applies: one approver</dd>" in html
    assert "raised to" not in html


def test_the_api_shows_the_proposed_and_effective_risk_but_not_the_rule(api, run, big_transfers):
    """The agent learns that its risk was raised, not the threshold that raised it (it
    could split a transfer to stay under it); reviewers see the rule on the page."""
    body = api.propose(run.pk, proposal(risk="low", arguments=transfer("5000.00"))).json()

    assert (body["proposed_risk"], body["risk"], body["required_approvals"]) == ("low", "high", 2)
    read = api.get(f"/operations/{body['id']}").json()
    assert (read["proposed_risk"], read["risk"]) == ("low", "high")
    checkpoints = api.get(f"/runs/{run.pk}/checkpoints").text
    assert "approval_rule" not in read and "1000" not in checkpoints


def test_the_api_shows_an_agent_executed_action_under_the_default_rule(api, run, project):
    rule(project, action="", approvals=TWO)

    body = api.propose(run.pk, agent_proposal(risk="low")).json()

    assert (body["risk"], body["required_approvals"]) == ("low", 2)
    assert Operation.objects.get(pk=body["id"]).approval_rule == "acme / any action: two approvers"


# --- rules are validated where an admin writes them -------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"when_argument": "amount"}, "when_operator"),
        ({"when_operator": "gt", "when_value": 1000}, "when_argument"),
        ({"when_argument": "amount", "when_operator": "gt", "when_value": "1000"}, "when_value"),
        ({"when_argument": "amount", "when_operator": "lte", "when_value": None}, "when_value"),
        ({"when_argument": "amount", "when_operator": "gt", "when_value": True}, "when_value"),
        (
            {"when_argument": "to..account", "when_operator": "eq", "when_value": "x"},
            "when_argument",
        ),
        ({"when_value": 1000}, "when_value"),
        ({"when_argument": "x", "when_operator": "eq", "when_value": float("nan")}, "when_value"),
    ],
    ids=[
        "argument-without-operator",
        "operator-without-argument",
        "ordering-a-string",
        "ordering-nothing",
        "ordering-a-boolean",
        "empty-path-segment",
        "value-without-condition",
        "nan",
    ],
)
def test_an_incomplete_or_incomparable_rule_is_refused(project, fields, field):
    policy = ApprovalPolicy(project=project, action="ledger.transfer", **fields)

    with pytest.raises(ValidationError) as refused:
        policy.full_clean()

    assert field in refused.value.message_dict


@pytest.mark.parametrize(
    ("fields", "arguments", "condition"),
    [
        ({}, transfer(10), ""),
        (above(1000), transfer(1001), " when amount > 1000"),
        (above(99.5), transfer("99.51"), " when amount > 99.5"),
        (
            {"when_argument": "to", "when_operator": "eq", "when_value": "x"},
            {"from": "A", "to": "x", "amount": 10},
            ' when to = "x"',
        ),
    ],
    ids=["unconditional", "integer", "decimal", "equal-to-text"],
)
def test_a_complete_rule_is_accepted_and_governs_what_it_matches(
    project, propose, fields, arguments, condition
):
    policy = ApprovalPolicy(project=project, action="ledger.transfer", min_risk=HIGH, **fields)
    policy.full_clean()
    policy.save()

    op = propose(risk=LOW, arguments=arguments)

    assert (op.risk, op.required_approvals) == (HIGH, 2)
    assert op.approval_rule == (
        "high risk: two people; risk raised to high by "
        f"acme / ledger.transfer{condition}: one approver, min risk high"
    )


def test_the_admin_explains_a_rule_it_refuses_and_lists_the_condition(client, project):
    admin = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(admin)
    form = {
        "project": project.pk,
        "action": "ledger.transfer",
        "min_risk": "high",
        "approvals_required": "2",
        "when_argument": "amount",
        "when_operator": "gt",
        "when_value": '"a lot"',
        "decision_timeout": "",
        "approval_ttl": "",
    }
    add = reverse("admin:runs_approvalpolicy_add")

    refused = client.post(add, form)

    assert refused.status_code == 200
    assert "compares numbers: enter one." in refused.content.decode()
    assert not ApprovalPolicy.objects.exists()

    assert client.post(add, {**form, "when_value": "1000"}).status_code == 302
    listing = client.get(reverse("admin:runs_approvalpolicy_changelist")).content.decode()
    assert "amount &gt; 1000" in listing
