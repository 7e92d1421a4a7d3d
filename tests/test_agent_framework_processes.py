"""The Agent Framework adapter as a real process against a live server: killed (SIGKILL)
right after its payment's effect and before the report, then restarted, it pays exactly
once and the workflow ends; the reviewer acts through the services as the pages do."""

import signal

import pytest

from runs.models import AgentToken, Operation
from tests.agent_framework_helpers import agent_process
from tests.client_helpers import client_for
from tests.helpers import decide_on
from tests.processes import eventually, said

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_killed_after_the_effect_and_restarted_it_pays_exactly_once(
    live_server, project, owner, reviewer, tmp_path
):
    token = AgentToken.issue(project=project, name="maf-agent", owner=owner)[1]
    ovs = client_for(live_server, token)
    run_id = ovs.start_run(ovs.open_session(title="Payments")["id"], goal="Pay the supplier")["id"]
    marker = tmp_path / "crashed"
    first = agent_process(
        live_server.url, token, run_id, tmp_path, "--start", CRASH_AFTER_EFFECT=str(marker)
    )
    try:
        assert said(first) == "waiting for reviewers"
        proposed = Operation.objects.filter(call_id="pay-1", status="proposed")
        decide_on(eventually(proposed.first, "the proposal", first), reviewer)
        assert first.wait(timeout=30) == -signal.SIGKILL
    finally:
        first.kill()
    assert Operation.objects.get(call_id="pay-1").status == "in_flight"
    assert len((tmp_path / "ledger").read_text().splitlines()) == 1

    second = agent_process(live_server.url, token, run_id, tmp_path)
    try:
        assert said(second) == 'Done: Read: {"paid": "INV-7", "amount": 45}'
        assert second.wait(timeout=10) == 0
    finally:
        second.kill()
    ledger = (tmp_path / "ledger").read_text().splitlines()
    assert ledger == [marker.read_text()]
    assert ledger[0].endswith(" INV-7 45")
    assert Operation.objects.get(call_id="pay-1").status == "committed"
