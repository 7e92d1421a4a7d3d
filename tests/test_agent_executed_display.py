"""An operation whose action is not one of Oversight's is carried out by the agent
itself: Oversight does not run it, re-check its precondition, verify or roll it back.
Reviewers are told so at the top of its page and on its row in the queue and the run's
page, in words, whatever its name looks like (#35 item 9)."""

import re

import pytest

from runs.models import Operation
from runs.queue import QUEUE_LIMIT

NOTICE = "Carried out by the agent itself, not by Oversight"
TAG = '<strong class="agent-executed-tag">Carried out by the agent itself</strong>'


@pytest.fixture
def agents_own(propose) -> Operation:
    return propose(
        "crm-1", action="crm.update", arguments={"id": 7}, rollback_kind=Operation.RollbackKind.NONE
    )


@pytest.fixture
def transfer(propose) -> Operation:
    return propose("pay-1")


def notice(page: str) -> str:
    """The notice's text with its markup and spacing taken out, or "" without one."""
    found = re.search(r'<section class="notice agent-executed".*?</section>', page, re.S)
    return " ".join(re.sub(r"<[^>]+>", " ", found[0]).split()) if found else ""


def row(page: str, operation: Operation) -> str:
    return re.search(rf'<tr id="op-{operation.pk}".*?</tr>', page, re.S)[0]


def test_an_agents_own_operation_says_at_the_top_that_oversight_does_not_carry_it_out(
    client, reviewer, agents_own
):
    client.force_login(reviewer)
    page = client.get(f"/operations/{agents_own.pk}/").text

    said = notice(page)
    assert said.startswith(NOTICE)
    assert "crm.update is not one of Oversight's actions" in said
    assert "cannot re-check its precondition, verify what it did or roll it back" in said
    assert "it only records what the agent reports" in said
    # Under the action's name, before what it would change and before the decision.
    assert page.index("<h1>") < page.index(NOTICE) < page.index('id="decision"')


def test_a_registered_actions_page_has_no_such_notice(client, reviewer, transfer):
    client.force_login(reviewer)
    page = client.get(f"/operations/{transfer.pk}/").text

    assert notice(page) == ""
    assert "Carried out by the agent" not in page


def test_a_name_from_before_the_rules_that_looks_built_in_is_still_the_agents(
    client, reviewer, agents_own
):
    """Rows proposed before names were made plain may hold a look-alike of a registered
    action (a Cyrillic i, U+0456), or markup: the notice names it as stored, escaped."""
    Operation.objects.filter(pk=agents_own.pk).update(action="f\u0456le.write")
    client.force_login(reviewer)
    assert "f\u0456le.write is not one of Oversight's actions, whatever its name suggests" in (
        notice(client.get(f"/operations/{agents_own.pk}/").text)
    )

    Operation.objects.filter(pk=agents_own.pk).update(action="<b>file.write</b>")
    page = client.get(f"/operations/{agents_own.pk}/").text
    assert "<code>&lt;b&gt;file.write&lt;/b&gt;</code> is not one of" in page
    assert "<b>file.write</b>" not in page


def test_the_queue_marks_the_agents_own_rows_in_words(client, reviewer, agents_own, transfer):
    client.force_login(reviewer)
    page = client.get("/approvals/").text

    assert TAG in row(page, agents_own)
    assert "Carried out by the agent" not in row(page, transfer)


def test_the_queues_refresh_marks_them_too(client, reviewer, agents_own):
    client.force_login(reviewer)
    fragment = client.get("/approvals/", headers={"HX-Request": "true"}).text

    assert "<h1>" not in fragment
    assert TAG in row(fragment, agents_own)


@pytest.mark.parametrize("count", [5, 60])
def test_the_queue_marks_them_at_the_same_number_of_queries(
    client, reviewer, propose, count, django_assert_num_queries
):
    """As tests/test_views_approvals.py counts for a queue of transfers: whether an
    operation is the agent's own is read with its row, not once a row."""
    for n in range(count):
        propose(f"crm-{n}", action="crm.update", arguments={"id": n}, rollback_kind="none")
    client.force_login(reviewer)
    client.get("/approvals/")  # The first visit stores the time zone in the session.
    with django_assert_num_queries(10):
        page = client.get("/approvals/").text
    assert page.count(TAG) == min(count, QUEUE_LIMIT)


def test_the_runs_page_marks_the_agents_own_operation(client, reviewer, run, agents_own, transfer):
    client.force_login(reviewer)
    page = client.get(f"/runs/{run.pk}/").text

    table = re.search(r"<h2>Operations</h2>.*?</table>", page, re.S)[0]
    assert re.search(rf"<code>crm\.update</code> {re.escape(TAG)}</td>", table)
    assert table.count(TAG) == 1
    timeline = page[page.index("<h2>Timeline</h2>") :]
    assert re.search(rf"crm\.update</code></a> \(Medium risk\) {re.escape(TAG)}", timeline)
    assert timeline.count(TAG) == 1
