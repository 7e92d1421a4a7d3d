"""The example OpenAI Agents SDK agent as a real process against a live server: killed
right after its payment's effect and before the report, then restarted, it pays exactly
once and completes. The reviewer acts through the services as the pages do."""

import pytest

from runs.models import AgentToken, Operation
from tests.helpers import decide_on
from tests.processes import agent_child, said

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def agent(live_server, token: str, run: str, state, **env: str):
    return agent_child("tests/openai_agents_child.py", live_server.url, token, run, state, **env)


@pytest.fixture
def token(project, owner) -> str:
    return AgentToken.issue(project=project, name="openai-agents-agent", owner=owner)[1]


def test_killed_after_the_effect_and_restarted_it_pays_exactly_once(
    live_server, token, reviewer, tmp_path
):
    marker = tmp_path / "crashed"
    first = agent(live_server, token, "run-9", tmp_path, CRASH_AFTER_EFFECT=str(marker))
    try:
        assert said(first) == "waiting for reviewers"
        decide_on(Operation.objects.get(call_id="pay-INV-7-1"), reviewer)
        assert first.wait(timeout=30) == 9
    finally:
        first.kill()
    assert Operation.objects.get(call_id="pay-INV-7-1").status == "in_flight"
    assert len((tmp_path / "ledger.txt").read_text().splitlines()) == 1

    second = agent(live_server, token, "run-9", tmp_path)
    try:
        assert said(second) == 'Done: {"paid": "INV-7", "amount": 45}'
        assert second.wait(timeout=10) == 0
    finally:
        second.kill()
    ledger = (tmp_path / "ledger.txt").read_text().splitlines()
    assert ledger == [marker.read_text()]
    assert ledger[0].startswith("INV-7 45 [")
    operation = Operation.objects.get(call_id="pay-INV-7-1")
    assert (operation.status, operation.run.status) == ("committed", "completed")
