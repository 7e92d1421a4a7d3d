"""Amounts read in sentences as they read in the tables (#34 item 14): "12,500.00", in a
preview's "why", in what changed since the reviewer looked, in the precondition and
rollback plan, and in the reason a refused transfer failed. What is stored with the
decision or sent to the agent as a value stays a plain decimal."""

import pytest

from runs.actions.base import Context, PreconditionFailed
from runs.actions.registry import get_action, parse_arguments
from runs.models import Account
from runs.services.previews import preview_of
from tests.helpers import page_of
from tests.test_views_decision_bar import decide_url, form_fields

pytestmark = pytest.mark.django_db

LARGE = {"from": "A", "to": "B", "amount": "12500.00"}


@pytest.fixture
def as_reviewer(client, reviewer):
    client.force_login(reviewer)
    return client


def test_an_overdraft_names_its_amounts_with_separators_and_stores_them_plain(propose, accounts):
    op = propose(arguments=LARGE)
    preview = preview_of(op)
    assert preview["why"] == (
        "A holds 5,000.00, less than the 12,500.00 to transfer: it would leave A at -7,500.00"
    )
    assert preview["rows"][0] == {"account": "A", "before": "5000.00", "after": "-7500.00"}


def test_an_amount_written_without_cents_is_read_with_them(as_reviewer, propose, accounts):
    op = propose(arguments={"from": "A", "to": "B", "amount": 1250, "require_balance_above": 1000})
    page = as_reviewer.get(page_of(op)).text
    assert "A holds at least 1,250.00 and more than 1,000.00 when the transfer is made." in page
    assert "A compensating transfer of 1,250.00 from B back to A." in page
    assert op.arguments["amount"] == 1250  # As the agent sent it.


def test_what_changed_since_the_reviewer_looked_names_balances_with_separators(
    as_reviewer, propose, accounts
):
    op = propose()
    seen = form_fields(as_reviewer.get(page_of(op)).text, "approve-form")
    Account.objects.filter(name="A").update(balance="14000.00")

    refused = as_reviewer.post(decide_url(op), seen)

    assert refused.status_code == 400
    assert (
        "The balance of A changed since you looked: it was 5,000.00, it is now 14,000.00."
        in refused.text
    )


def test_a_transfer_refused_at_its_precondition_says_its_amounts_with_separators(propose, accounts):
    op = propose(arguments={**LARGE, "amount": "400", "require_balance_above": "1500"})
    Account.objects.filter(name="A").update(balance="1500.00")
    action = get_action(op.action)
    with pytest.raises(PreconditionFailed) as refused:
        action.precondition(parse_arguments(action, op.arguments), Context(op))
    assert str(refused.value) == "A holds 1,500.00, not more than 1,500.00"
