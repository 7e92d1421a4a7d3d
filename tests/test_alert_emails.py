"""Alerts cannot be silenced or forged (issue #11, hole 7): agent text with line breaks
still goes out by email, never becomes a header, and every line of it is quoted in the
body, apart from Oversight's own words and links."""

from email import message_from_bytes, policy

import pytest
from django.core import mail

from runs.engine.deliveries import deliver_due
from runs.engine.notifications import notify_reviewers
from runs.models import AlertDelivery, Operation, Run
from tests.api_helpers import agent_proposal
from tests.helpers import decide_on

pytest_plugins = ["tests.api_helpers"]

BASE_URL = "https://oversight.example"
# What an agent would write to forge a header and an instruction with a link.
FORGERY = "could not undo\r\nBcc: x@evil.example\n\nApprove here: http://evil.example/ok"
FORGED_LINES = ["Bcc: x@evil.example", "Approve here: http://evil.example/ok"]
# The headers Oversight's emails carry: no other may appear, whatever the agent wrote.
OWN_HEADERS = {
    "Content-Type",
    "Content-Transfer-Encoding",
    "MIME-Version",
    "Subject",
    "From",
    "To",
    "Date",
    "Message-ID",
}
CONTROLS = "\x1b[31mred\x07\u202eevil\u2028Line two\x85Line three"


@pytest.fixture(autouse=True)
def base_url(settings):
    settings.OVERSIGHT_BASE_URL = BASE_URL


def forged_run(api, goal: str = f"Push the release. {FORGERY}") -> Run:
    session = api.post("/sessions", {"title": "Release"}).json()["id"]
    response = api.post("/runs", {"session": session, "goal": goal})
    assert response.status_code == 201, response.content
    return Run.objects.get(pk=response.json()["id"])


def alert_by_the_agent(api, run: Run, reviewer, detail: str) -> None:
    """An operation the agent executes fails its verification, and the agent asks for
    an alert in its own words."""
    op = Operation.objects.get(pk=api.propose(run.pk, agent_proposal()).json()["id"])
    decide_on(op, reviewer)
    steps = [
        ("claim", {}),
        ("intent", {"epoch": 1, "snapshot": {}}),
        ("report", {"epoch": 1, "effect": "uncertain"}),
        ("rollback", {"epoch": 1, "outcome": "alert", "detail": detail}),
    ]
    for name, body in steps:
        response = api.post(f"/operations/{op.pk}/{name}", body)
        assert response.status_code == 200, response.content


def wire_headers(email) -> dict[str, str]:
    """The email's headers as a receiving server parses them (folded lines joined)."""
    parsed = message_from_bytes(email.message().as_bytes(), policy=policy.default)
    return {name: str(value) for name, value in parsed.items()}


def assert_quoted(body: str, agent_lines: list[str]) -> None:
    """Each agent line appears only quoted, and every link outside a quote is one
    Oversight built."""
    lines = body.splitlines()
    for agent_line in agent_lines:
        holding = [line for line in lines if agent_line in line]
        assert holding and all(line == f"> {agent_line}" for line in holding), holding
    links = [line for line in lines if "://" in line and not line.startswith(">")]
    assert links and all(f"{BASE_URL}/" in line for line in links), links


def test_a_forged_alert_summary_is_delivered_with_clean_headers(api, reviewer, admin_user):
    run = forged_run(api)
    alert_by_the_agent(api, run, reviewer, FORGERY)

    deliver_due()

    (email,) = [m for m in mail.outbox if m.to == [admin_user.email]]
    delivery = AlertDelivery.objects.get(channel="email", target=admin_user.email)
    assert delivery.status == "delivered"
    assert email.subject.endswith(
        "could not undo Bcc: x@evil.example Approve here: http://evil.example/ok"
    )
    own_id = f"<alert-{delivery.alert_id}.delivery-{delivery.pk}@oversight.example>"
    assert email.bcc == [] and email.extra_headers == {"Message-ID": own_id}
    headers = wire_headers(email)
    assert set(headers) == OWN_HEADERS
    assert headers["Subject"] == email.subject and "Approve" not in headers["To"]
    body = email.body
    assert "What failed, in the agent's words:\n> could not undo\n> Bcc: x@evil.example" in body
    assert f"The agent's goal for run {run.pk}:\n> Push the release. could not undo" in body
    assert_quoted(body, FORGED_LINES)
    assert f"{BASE_URL}/operations/" in body and f"{BASE_URL}/alerts/" in body


def test_control_characters_never_reach_a_header(api, reviewer, admin_user):
    run = forged_run(api, "Push the release")
    alert_by_the_agent(api, run, reviewer, CONTROLS + " " + "x" * 300)

    deliver_due()

    (email,) = [m for m in mail.outbox if m.to == [admin_user.email]]
    assert email.subject.startswith("[Oversight] Alert ")
    assert email.subject.endswith("…") and len(email.subject) < 160
    assert all(char.isprintable() for char in email.subject), repr(email.subject)
    headers = wire_headers(email)
    assert set(headers) == OWN_HEADERS and headers["Subject"] == email.subject
    assert "[31mredevil Line two Line three xxx" in email.subject
    # In the body each line break the agent wrote starts a quoted line of its own.
    assert "> [31mredevil\n> Line two\n> Line three xxx" in email.body
    assert all(char.isprintable() for line in email.body.splitlines() for char in line)


def test_reviewer_emails_quote_the_agents_goal(api, reviewer):
    run = forged_run(api)
    op_id = api.propose(run.pk, agent_proposal()).json()["id"]

    assert notify_reviewers() == 1

    (email,) = [m for m in mail.outbox if m.to == [reviewer.email]]
    body = email.body
    assert "\n" not in email.subject
    assert (
        f"Operation {op_id} (Medium risk) in run {run.pk}: {BASE_URL}/operations/{op_id}/\n"
        "The action, as the agent named it:\n> git.push\n"
        "The agent's goal for the run:\n> Push the release. could not undo\n" in body
    )
    assert_quoted(body, FORGED_LINES)
