"""An open request waits for a person: its status reads in the waiting colour on its
page, on its run's page and in the audit history, while an open alert, which is an
error to settle, stays in the error colour. Each page still passes axe-core."""

import pytest

from runs.engine.worker import Worker
from runs.services.requests import ask
from runs.services.runs import start_run
from tests.browser.conftest import assert_accessible, sign_in
from tests.conftest import AGENT

pytestmark = pytest.mark.django_db(transaction=True)
# The colour ``selector`` is drawn in, and the colour ``variable`` stands for here.
COLOURS = """([selector, variable]) => {
  const probe = document.createElement("span");
  probe.style.color = `var(${variable})`;
  document.body.append(probe);
  const expected = getComputedStyle(probe).color;
  probe.remove();
  return [getComputedStyle(document.querySelector(selector)).color, expected];
}"""


@pytest.fixture
def waiting(approved, admin_user, session, agent_token):
    """An open alert (a verification the target lies about, with no undo), and in
    another run a request the agent asks."""
    approved("http-rigged-no-undo")
    Worker().drain()
    other = start_run(session=session, goal="Name the release", actor=AGENT)
    return ask(run=other, prompt="What should it be called?", actor=AGENT, token=agent_token)[0]


def drawn(page, url: str, selector: str, variable: str) -> bool:
    page.goto(url)
    assert_accessible(page)
    colour, expected = page.evaluate(COLOURS, [selector, variable])
    return colour == expected


def test_an_open_request_is_waiting_and_an_open_alert_an_error(page, reviewer, waiting):
    sign_in(page, reviewer)

    assert drawn(page, f"/requests/{waiting.pk}/", "#outcome .status", "--warn")
    assert drawn(page, f"/runs/{waiting.run_id}/", f"#request-{waiting.pk} .status", "--warn")
    assert drawn(page, f"/audit/runs/{waiting.run_id}/", ".request-status.status-open", "--warn")
    assert drawn(page, "/alerts/", ".alert-card .status-open", "--bad")
