"""The example OpenAI Agents SDK agent as a real process against a live server: killed
right after its payment's effect and before the report, then restarted, it pays exactly
once and completes; killed between its proposal and its pause, then restarted, it waits
for the same proposal and goes on once approved. The reviewer acts through the services
as the pages do."""

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


def test_killed_between_its_proposal_and_its_pause_it_goes_on_once_approved(
    live_server, token, reviewer, tmp_path
):
    marker = tmp_path / "crashed"
    first = agent(live_server, token, "run-8", tmp_path, CRASH_AFTER_PROPOSAL=str(marker))
    try:
        assert first.wait(timeout=30) == 9
    finally:
        first.kill()
    assert marker.read_text() == "pay-INV-7-1"
    second = agent(live_server, token, "run-8", tmp_path)
    try:
        assert said(second) == "waiting for reviewers"
        assert Operation.objects.filter(run__external_id="run-8").count() == 1
        decide_on(Operation.objects.get(call_id="pay-INV-7-1"), reviewer)
        assert said(second) == 'Done: {"paid": "INV-7", "amount": 45}'
        assert second.wait(timeout=10) == 0
    finally:
        second.kill()
    assert len((tmp_path / "ledger.txt").read_text().splitlines()) == 1
    # Restarted once more after the end: it says what it concluded, and does nothing.
    third = agent(live_server, token, "run-8", tmp_path)
    try:
        assert said(third) == 'Done: {"paid": "INV-7", "amount": 45}'
        assert third.wait(timeout=10) == 0
    finally:
        third.kill()
    assert len((tmp_path / "ledger.txt").read_text().splitlines()) == 1
