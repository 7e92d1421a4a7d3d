"""The same call made again (#38, item 3): an agent that lost track of a call (killed
while it ran, say) may propose it again under a new call id. Its reviewers see the
earlier ones on its page, each with what it means for this one (made already: approving
this one makes it twice), found by the arguments as proposed or as approved."""

import pytest
from django.urls import reverse

from runs.models import Decision, Operation
from runs.services.repeats import SHOWN, made_before
from tests.helpers import decide_on, drained, sign_in

PAY = {"from": "A", "to": "B", "amount": "100.00"}


def page(client, operation: Operation) -> str:
    sign_in(client, "reviewer", "pw")
    return client.get(reverse("operation", args=[operation.pk])).text


def test_the_reviewer_sees_the_same_call_made_before_and_what_became_of_it(
    accounts, propose, reviewer, client
):
    first = propose("pay-1", arguments=PAY)
    decide_on(first, reviewer)
    assert drained(first).status == Operation.Status.COMMITTED
    other = propose("pay-other", arguments={**PAY, "amount": "5.00"})
    again = propose("pay-2", arguments=PAY)

    shown = page(client, again)
    assert "The agent made this same call before" in shown
    assert (
        f"Operation {first.pk}</a> (call <code>pay-1</code>), committed: its effect "
        "happened: approving this one makes it twice."
    ) in shown
    assert f"Operation {other.pk}</a>" not in shown
    assert "The agent made this same call before" not in page(client, other)
    assert "The agent made this same call before" not in page(client, first)  # only earlier


def test_a_call_a_reviewer_edited_is_found_by_what_the_agent_first_proposed(
    accounts, propose, reviewer
):
    first = propose("pay-1", arguments=PAY)
    decide_on(first, reviewer, Decision.Kind.EDIT, arguments={**PAY, "amount": "90.00"})
    again = propose("pay-2", arguments=PAY)
    assert [(before.pk, meaning) for before, meaning in made_before(again)] == [
        (first.pk, "it is approved and not made yet")
    ]


def test_operations_proposed_before_the_hash_was_kept_are_found_by_their_arguments(propose):
    """Migration 0042 left "" in the column: "" is no hash, and two such operations
    with different arguments are not the same call (nor blocks one the other's
    requeue)."""
    first = propose("pay-1", arguments=PAY)
    other = propose("pay-other", arguments={**PAY, "amount": "5.00"})
    again = propose("pay-2", arguments=PAY)
    Operation.objects.update(proposed_hash="")
    for operation in (first, other, again):
        operation.refresh_from_db()
    assert [before.pk for before, _ in made_before(again)] == [first.pk]
    assert [before.pk for before, _ in made_before(other)] == []
    assert [before.pk for before, _ in made_before(first)] == []


@pytest.mark.parametrize("earlier", [1, SHOWN + 3])
def test_the_list_is_one_query_and_at_most_a_few_lines(propose, earlier, django_assert_num_queries):
    for n in range(earlier):
        propose(f"pay-{n}", arguments=PAY)
    again = propose("pay-last", arguments=PAY)
    with django_assert_num_queries(1):
        shown = made_before(again)
    assert len(shown) == min(earlier, SHOWN)
    assert shown[0][0].call_id == f"pay-{earlier - 1}"  # the latest first
