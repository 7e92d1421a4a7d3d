import re
import threading

import pytest
from django.db import connection
from django.test import Client

from runs import queue
from runs.models import Decision, Operation
from runs.services.runs import open_session, start_run
from tests.conftest import AGENT
from tests.helpers import decide_on, page_of, post_decision, shown, stored

HTMX = {"HX-Request": "true"}
EMAIL = {"to": ["ops@example.com"], "subject": "Report", "body": "All green."}


def argument_shown(page: str, key: str) -> str:
    return re.search(rf"<dt><code>{key}</code></dt>\s*<dd><pre class=\"code\">(.*?)</pre>", page)[1]


def field_errors(page: str) -> list[str]:
    return re.findall(r'<p class="error field-error" role="alert">(.*?)</p>', page)


@pytest.fixture
def op(propose) -> Operation:
    return propose("call-1")


@pytest.fixture
def as_reviewer(client, reviewer) -> Client:
    client.force_login(reviewer)
    return client


# --- The operation page ---------------------------------------------------------------


def test_anonymous_is_sent_to_login(client, op):
    response = client.get(page_of(op))
    assert response.status_code == 302
    assert response["Location"] == f"/accounts/login/?next={page_of(op)}"


def test_other_projects_reviewer_gets_not_found(client, outsider, op):
    client.force_login(outsider)
    assert client.get(page_of(op)).status_code == 404


def test_auditor_sees_the_operation_but_no_decision_forms(client, auditor, op):
    client.force_login(auditor)
    response = client.get(page_of(op))
    assert response.status_code == 200
    assert "does not include deciding" in response.text
    assert "/decide/" not in response.text


def test_page_shows_what_a_reviewer_needs_to_decide(as_reviewer, op):
    page = as_reviewer.get(page_of(op)).text

    assert "Pay the supplier invoice" in page
    assert argument_shown(page, "amount") == "100"
    assert argument_shown(page, "from") == "&quot;A&quot;"
    assert "A holds at least 100.00 when the transfer is made." in page
    assert "compensating operation — A compensating transfer of 100.00 from B back to A." in page
    assert f"<code>{op.idempotency_key}</code>" in page
    assert "<code>operation.proposed</code>" in page
    assert "0 of 1" in page


# --- Deciding: who and how ------------------------------------------------------------


def test_decide_wrong_method_is_refused(as_reviewer, op):
    assert as_reviewer.get(f"/operations/{op.pk}/decide/").status_code == 405


@pytest.mark.parametrize(("role", "status"), [("auditor", 403), ("outsider", 404)])
def test_decide_without_the_role_is_refused(client, request, op, role, status):
    client.force_login(request.getfixturevalue(role))
    before = stored()
    assert post_decision(client, op).status_code == status
    assert stored() == before


def test_decide_needs_the_csrf_token(reviewer, op):
    client = Client(enforce_csrf_checks=True)
    client.force_login(reviewer)
    data = {"kind": "approve", "arguments_hash": op.arguments_hash}

    assert client.post(f"/operations/{op.pk}/decide/", data).status_code == 403
    op.refresh_from_db()
    assert op.status == Operation.Status.PROPOSED

    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', client.get(page_of(op)).text)
    data["csrfmiddlewaretoken"] = token[1]
    data.update(shown(client, op))
    assert client.post(f"/operations/{op.pk}/decide/", data).status_code == 302


def test_approve_redirects_to_the_page_and_approves(as_reviewer, op):
    response = post_decision(as_reviewer, op)

    assert response.status_code == 302
    assert response["Location"] == page_of(op)
    op.refresh_from_db()
    assert op.status == Operation.Status.APPROVED
    assert "Approved; a worker carries it out now." in as_reviewer.get(page_of(op)).text


def test_reject_without_a_reason_is_refused_and_changes_nothing(as_reviewer, op, accounts):
    before = stored()

    response = post_decision(as_reviewer, op, "reject")

    assert response.status_code == 400
    assert "Say why you reject it." in field_errors(response.text)
    assert '<details class="more" open>' in response.text
    assert stored() == before


def test_the_page_offers_one_reject_whose_reason_the_agent_reads(as_reviewer, op, accounts):
    """#34: "Reject" and "Reject with reply" confused newcomers; both rejected, and the
    agent read the words either way."""
    page = as_reviewer.get(page_of(op)).text

    forms = re.findall(r'<form method="post" action="[^"]*decide/" id="([\w-]+)"', page)
    assert forms == ["approve-form", "reject-form"]
    assert re.findall(r"<summary>([^<]*)</summary>", page) == ["Edit and approve", "Reject"]
    assert '<label for="reject-comment">Reason (required): the agent reads it</label>' in page
    assert "reply" not in page.lower()


def test_reply_rejects_with_the_reply_as_the_agents_result(as_reviewer, op):
    """A script, or a page from before the one Reject, may still post a reply."""
    response = post_decision(as_reviewer, op, "reply", comment="Use account C instead.")

    assert response.status_code == 302
    op.refresh_from_db()
    assert op.status == Operation.Status.REJECTED
    assert op.result == {"decision": "rejected", "reply": "Use account C instead."}
    page = as_reviewer.get(page_of(op)).text
    assert "Rejected; the agent reads your reason." in page
    assert re.search(
        r"<li><strong>reject with reply</strong> by reviewer, .*?: “Use account C instead.”", page
    )


def test_a_reply_without_words_is_refused_above_the_forms(as_reviewer, op, accounts):
    """The page has no box for a reply: the refusal is said where it is seen, and the
    reviewer rejects with the page's one Reject."""
    before = stored()

    response = post_decision(as_reviewer, op, "reply", comment=" ")

    assert response.status_code == 400
    assert re.search(
        r'<div class="error" role="alert" tabindex="-1" autofocus><p>Say why you reject it.</p>',
        response.text,
    )
    assert field_errors(response.text) == []
    assert 'id="reject-comment"' in response.text
    assert stored() == before


# --- Editing the arguments ------------------------------------------------------------


def test_edit_with_invalid_json_shows_the_json_error(as_reviewer, op):
    before = stored()

    response = post_decision(as_reviewer, op, "edit", arguments='{"from": "A",')

    assert response.status_code == 400
    assert any(e.startswith("Not valid JSON: ") for e in field_errors(response.text))
    assert 'aria-invalid="true"' in response.text
    assert stored() == before


def test_edit_breaking_the_actions_schema_shows_the_field_error(as_reviewer, op):
    before = stored()

    response = post_decision(
        as_reviewer, op, "edit", arguments='{"from": "A", "to": "B", "amount": -5}'
    )

    assert response.status_code == 400
    assert field_errors(response.text) == ["arguments.amount: Input should be greater than 0"]
    assert "&quot;amount&quot;: -5" in response.text  # The reviewer's text is kept.
    assert stored() == before


def test_edit_changes_the_arguments_and_the_page_shows_the_diff(as_reviewer, op):
    response = post_decision(
        as_reviewer, op, "edit", arguments='{"from": "A", "to": "B", "amount": 50}'
    )

    assert response.status_code == 302
    op.refresh_from_db()
    assert (op.status, op.arguments["amount"]) == (Operation.Status.APPROVED, 50)
    assert op.proposed_arguments["amount"] == 100
    page = as_reviewer.get(page_of(op)).text
    assert "Edited by a reviewer" in page
    assert '<span class="del">-   &quot;amount&quot;: 100,</span>' in page
    assert '<span class="add">+   &quot;amount&quot;: 50,</span>' in page


# --- Irreversible operations and four eyes --------------------------------------------


def test_irreversible_operation_needs_the_action_name_typed(as_reviewer, propose):
    email = propose("mail", action="email.send", arguments=EMAIL, rollback_kind="out_of_band")
    assert "Type <code>email.send</code> to confirm" in as_reviewer.get(page_of(email)).text

    refused = post_decision(as_reviewer, email, confirm="email")
    assert refused.status_code == 400
    assert "This cannot be undone: type email.send to confirm." in field_errors(refused.text)
    email.refresh_from_db()
    assert email.status == Operation.Status.PROPOSED

    assert post_decision(as_reviewer, email, confirm="email.send").status_code == 302
    email.refresh_from_db()
    assert email.status == Operation.Status.APPROVED


def test_run_owner_cannot_decide(client, owner, op):
    client.force_login(owner)
    assert "You own this run" in client.get(page_of(op)).text
    before = stored()

    response = post_decision(client, op)

    assert response.status_code == 400
    assert "someone else must decide on it" in response.text
    assert stored() == before


def test_high_risk_operation_needs_two_different_reviewers(client, reviewer, reviewer2, propose):
    risky = propose("call-1", risk=Operation.Risk.HIGH)
    client.force_login(reviewer)

    assert post_decision(client, risky).status_code == 302
    risky.refresh_from_db()
    assert risky.status == Operation.Status.PROPOSED
    page = client.get(page_of(risky)).text
    assert "1 of 2: reviewer" in page
    assert "A second, different reviewer must approve too." in page

    assert post_decision(client, risky).status_code == 400
    assert risky.decisions.count() == 1

    client.force_login(reviewer2)
    assert post_decision(client, risky).status_code == 302
    risky.refresh_from_db()
    assert risky.status == Operation.Status.APPROVED


def test_page_counts_only_approvals_since_the_last_edit(client, reviewer, reviewer2, propose):
    """reviewer approves, then edits; reviewer2 edits back to the first arguments: the
    first approval was retracted by the edit, and the page says so."""
    risky = propose("call-1", risk=Operation.Risk.HIGH)
    first = dict(risky.arguments)
    decide_on(risky, reviewer)
    decide_on(risky, reviewer, "edit", arguments={**first, "amount": "150.00"})
    decide_on(risky, reviewer2, "edit", arguments=first)
    client.force_login(reviewer)

    page = client.get(page_of(risky)).text

    assert "1 of 2: reviewer2" in page
    assert "A second, different reviewer must approve too." not in page
    assert post_decision(client, risky).status_code == 302
    risky.refresh_from_db()
    assert risky.status == Operation.Status.APPROVED


def approve_at_once(op: Operation, reviewers) -> list[int]:
    """Each reviewer posts an approval from their own thread and connection, released
    together; returns the response statuses."""
    start, statuses = threading.Barrier(len(reviewers)), []

    def approve(user) -> None:
        try:
            client = Client()
            client.force_login(user)
            start.wait(timeout=10)
            statuses.append(post_decision(client, Operation.objects.get(pk=op.pk)).status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=approve, args=(user,)) for user in reviewers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return sorted(statuses)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("risk", "statuses", "approvals"),
    [(Operation.Risk.HIGH, [302, 302], 2), (Operation.Risk.MEDIUM, [302, 400], 1)],
)
def test_simultaneous_approvals_have_one_consistent_outcome(
    reviewer, reviewer2, propose, risk, statuses, approvals
):
    op = propose("call-1", risk=risk)

    assert approve_at_once(op, [reviewer, reviewer2]) == statuses

    op.refresh_from_db()
    assert op.status == Operation.Status.APPROVED
    assert op.decisions.filter(kind=Decision.Kind.APPROVE).count() == approvals
    assert op.checkpoints.filter(to_status=Operation.Status.APPROVED).count() == 1


# --- The live outcome panel -----------------------------------------------------------


def test_outcome_fragment_polls_until_the_operation_ends(as_reviewer, reviewer2, op):
    live = as_reviewer.get(f"/operations/{op.pk}/outcome/", headers=HTMX).text
    assert "<html" not in live
    # The panel, and the short status a screen reader announces (a region of its own,
    # never swapped: a swapped live region is not read).
    status, panel = live.strip().split("\n", 1)
    assert status == (
        '<p id="outcome-status" class="visually-hidden" role="status" hx-swap-oob="true">'
        "Status: Proposed</p>"
    )
    assert panel.startswith('<section id="outcome"')
    assert "aria-live" not in panel
    assert 'hx-trigger="every 2s"' in panel
    assert f'hx-vals=\'{{"version": "{op.version}"}}\'' in panel

    # Polled with the version it shows, an unchanged operation answers 204: nothing is
    # swapped, nothing announced.
    unchanged = as_reviewer.get(
        f"/operations/{op.pk}/outcome/", {"version": op.version}, headers=HTMX
    )
    assert (unchanged.status_code, unchanged.content) == (204, b"")

    decide_on(op, reviewer2, Decision.Kind.REJECT, comment="Not this month.")

    ended = as_reviewer.get(
        f"/operations/{op.pk}/outcome/", {"version": op.version - 1}, headers=HTMX
    ).text
    assert "Status: Rejected</p>" in ended
    assert "hx-trigger" not in ended
    assert "Rejected" in ended
    assert "Not this month." in ended


def test_after_a_decision_the_next_operation_waiting_for_the_reviewer_opens(
    as_reviewer, reviewer, propose, op
):
    second, third = propose("call-2"), propose("call-3")
    decide_on(second, reviewer)  # decided already: skipped

    response = post_decision(as_reviewer, op, "reject", comment="Not now.")
    assert response["Location"] == page_of(third)
    page = as_reviewer.get(page_of(third)).text
    assert (
        f'<a href="{page_of(op)}">Operation {op.pk}</a> (ledger.transfer): Rejected; the '
        "agent reads your reason. This one waits for you next."
    ) in page

    # The last one decided, nothing else waits: the reviewer stays to watch it.
    response = post_decision(as_reviewer, third, "reject", comment="Nor this.")
    assert response["Location"] == page_of(third)


def test_next_walks_forward_through_the_queue_and_previous_back_going_round(
    as_reviewer, reviewer, propose, op
):
    """Next and previous follow the queue's order (oldest first), skip what the
    reviewer already approved, and go round past either end: from the oldest, next
    does not come back to it (it used to go back and forth between the two oldest)."""
    approved, second, third = propose("call-2"), propose("call-3"), propose("call-4")
    decide_on(approved, reviewer)  # It waits for a second reviewer, not for this one.

    def around(operation) -> tuple[int | None, int | None]:
        page = as_reviewer.get(page_of(operation)).text
        found = [
            re.search(rf'id="{side}-operation" href="/operations/(\d+)/"', page)
            for side in ("previous", "next")
        ]
        return tuple(int(match[1]) if match else None for match in found)

    assert around(op) == (third.pk, second.pk)
    assert around(second) == (op.pk, third.pk)
    assert around(third) == (second.pk, op.pk)


def test_after_a_decision_the_next_one_after_it_in_the_queue_opens(as_reviewer, propose, op):
    second, third = propose("call-2"), propose("call-3")

    response = post_decision(as_reviewer, second, "reject", comment="Not now.")

    assert response["Location"] == page_of(third)  # Not the oldest, behind it.


def test_the_next_operation_for_the_reviewer_may_wait_beyond_the_queues_first_rows(
    as_reviewer, reviewer, project, propose, op, monkeypatch
):
    monkeypatch.setattr(queue, "QUEUE_LIMIT", 1)
    session = open_session(project=project, owner=reviewer, agent="their-own-agent")
    propose("own", target=start_run(session=session, goal="Theirs", actor=AGENT))
    later = propose("call-2")  # Beyond the first row, which is not theirs to decide.

    response = post_decision(as_reviewer, op, "reject", comment="Not now.")

    assert response["Location"] == page_of(later)
