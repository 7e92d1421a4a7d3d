"""Text from agents and people is shown as text on every page, never run as markup."""

import pytest

from runs.actors import Actor
from runs.models import Decision, Operation, Role
from runs.payloads import MessageKind
from runs.services.alerts import raise_alert
from runs.services.runs import append_message, start_run
from runs.transitions import transition_operation
from tests.conftest import AGENT, make_user
from tests.helpers import decide_on

XSS = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
WORKER = Actor.worker("test-worker")


def alert_on(op: Operation, summary: str, state_left: dict) -> None:
    """Drive an approved operation to a failed verification with no undo, as a worker would."""
    for status in (Operation.Status.IN_FLIGHT, Operation.Status.VERIFY_FAILED):
        transition_operation(operation=op, to=status, actor=WORKER)
    raise_alert(operation=op, actor=WORKER, summary=summary, state_left=state_left)


@pytest.fixture
def hostile(session, reviewer, reviewer2, propose) -> dict[str, str]:
    """A run where every piece of user-supplied text carries a script; the pages to check."""
    run = start_run(session=session, goal=f"Goal {XSS}", actor=AGENT)
    append_message(run=run, kind=MessageKind.AGENT, payload={"text": f"Said {XSS}"}, actor=AGENT)
    pending = propose("pending", target=run, action="notes.write", arguments={"note": XSS})
    rejected = propose("rejected", target=run)
    decide_on(rejected, reviewer, Decision.Kind.REJECT, comment=f"No: {XSS}")
    failed = propose("failed", target=run)
    decide_on(failed, reviewer2)
    alert_on(failed, f"Failed {XSS}", {"left": XSS})
    return {
        "home": "/",
        "approvals": "/approvals/",
        "approvals filtered": f"/approvals/?action={XSS}",
        "pending operation": f"/operations/{pending.pk}/",
        "rejected operation": f"/operations/{rejected.pk}/",
        "runs": "/runs/",
        "run": f"/runs/{run.pk}/",
        "cancel": f"/runs/{run.pk}/cancel/",
        "alerts": "/alerts/",
    }


@pytest.mark.parametrize(
    ("page", "expected"),
    [
        ("home", [f"Goal {ESCAPED}"]),
        ("approvals", [f"Goal {ESCAPED}"]),
        ("approvals filtered", [f'value="{ESCAPED}"']),
        ("pending operation", [f"Goal {ESCAPED}", f"Said {ESCAPED}", f"&quot;{ESCAPED}&quot;"]),
        ("rejected operation", [f"Goal {ESCAPED}", f"No: {ESCAPED}"]),
        ("runs", [f"Goal {ESCAPED}"]),
        ("run", [f"Goal {ESCAPED}", f"Said {ESCAPED}", f"No: {ESCAPED}", f"Failed {ESCAPED}"]),
        ("cancel", [f"Goal {ESCAPED}"]),
        ("alerts", [f"Failed {ESCAPED}", f"&quot;{ESCAPED}&quot;"]),
    ],
)
def test_user_supplied_markup_is_shown_as_text(client, project, hostile, page, expected):
    client.force_login(make_user("lead", project, Role.REVIEWER, Role.ADMIN))

    response = client.get(hostile[page])

    assert response.status_code == 200
    assert XSS not in response.text
    for text in expected:
        assert text in response.text
