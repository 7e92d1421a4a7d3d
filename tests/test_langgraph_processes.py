"""The example LangGraph agent as a real process against a live server: killed right
after its payment's effect and before the report, then restarted, it pays exactly once
and completes; reviewers act through the services as the pages do."""

import pytest

from runs.models import AgentToken, HumanRequest, Operation
from tests.helpers import decide_on
from tests.langgraph_helpers import agent_process, choose
from tests.processes import eventually, said

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_killed_after_the_effect_and_restarted_it_pays_exactly_once(
    live_server, project, owner, reviewer, tmp_path
):
    token = AgentToken.issue(project=project, name="langgraph-agent", owner=owner)[1]
    marker = tmp_path / "crashed"
    first = agent_process(
        live_server.url, token, "thread-9", tmp_path, CRASH_AFTER_EFFECT=str(marker)
    )
    try:
        assert said(first) == "waiting for reviewers"
        eventually(HumanRequest.objects.filter(status="open").exists, "the question", first)
        choose("thread-9", reviewer, "INV-42")
        proposed = Operation.objects.filter(call_id="pay-INV-42-1", status="proposed")
        decide_on(eventually(proposed.first, "the proposal", first), reviewer)
        assert first.wait(timeout=30) == 9
    finally:
        first.kill()
    assert Operation.objects.get(call_id="pay-INV-42-1").status == "in_flight"
    assert len((tmp_path / "ledger.txt").read_text().splitlines()) == 1
    second = agent_process(live_server.url, token, "thread-9", tmp_path)
    try:
        assert said(second) == "waiting for reviewers"
        assert said(second) == 'Done: {"paid": "INV-42"}'
        assert second.wait(timeout=10) == 0
    finally:
        second.kill()
    ledger = (tmp_path / "ledger.txt").read_text().splitlines()
    assert ledger == [marker.read_text()]
    assert ledger[0].startswith("INV-42 120 [")
    assert Operation.objects.get(call_id="pay-INV-42-1").status == "committed"


def test_killed_between_its_proposal_and_its_pause_it_goes_on_once_approved(
    live_server, project, owner, reviewer, tmp_path
):
    token = AgentToken.issue(project=project, name="langgraph-agent", owner=owner)[1]
    marker = tmp_path / "crashed"
    first = agent_process(
        live_server.url, token, "thread-8", tmp_path, CRASH_AFTER_PROPOSAL=str(marker)
    )
    try:
        assert said(first) == "waiting for reviewers"
        eventually(HumanRequest.objects.filter(status="open").exists, "the question", first)
        choose("thread-8", reviewer, "INV-7")
        assert first.wait(timeout=30) == 9
    finally:
        first.kill()
    assert marker.read_text() == "pay-INV-7-1"
    second = agent_process(live_server.url, token, "thread-8", tmp_path)
    try:
        assert said(second) == "waiting for reviewers"
        decide_on(Operation.objects.get(call_id="pay-INV-7-1", status="proposed"), reviewer)
        assert said(second) == 'Done: {"paid": "INV-7", "amount": 45}'
        assert second.wait(timeout=10) == 0
    finally:
        second.kill()
    assert [line.split(" [")[0] for line in (tmp_path / "ledger.txt").read_text().splitlines()] == [
        "INV-7 45"
    ]
    assert Operation.objects.get(call_id="pay-INV-7-1").status == "committed"
    assert Operation.objects.count() == 1
