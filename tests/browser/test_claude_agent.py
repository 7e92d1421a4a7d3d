"""A Claude Agent SDK agent as a real process (tests/claude_agent_child.py: the bundled
CLI, a scripted model on loopback), steered by a reviewer in the browser: its deferred
call, edited and approved in the page, runs with the edit when the session resumes; a
rejection's reason reaches the model. The run's audit page shows who decided, and when."""

import pytest
from playwright.sync_api import Page, expect

from runs.models import AgentToken, Checkpoint, Operation, Run
from tests.browser.conftest import sign_in
from tests.browser.deciding import decided_by_reviewer, edit, reject
from tests.browser.test_langgraph import open_proposal, proposal
from tests.fake_anthropic import FakeAnthropic, ScriptedModel
from tests.processes import said
from tests.test_claude_agent_processes import agent_process

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.claude_cli,
]

ASKED = {"invoice": "INV-7", "amount": 45}
COMMENT = "Net of the 5 € credit note."
REASON = "INV-7 was paid by card last week."


def started(live_server, project, owner, tmp_path, api):
    token = AgentToken.issue(project=project, name="claude-agent", owner=owner)[1]
    agent = agent_process(live_server.url, token, api, tmp_path)
    assert said(agent) == "waiting for reviewers"
    return agent


def test_an_edit_in_the_browser_is_what_the_resumed_session_runs(
    page: Page, live_server, project, owner, reviewer, auditor, tmp_path
):
    model = ScriptedModel("mcp__books__pay", ASKED, tool_use_id="toolu_pay_7")
    with FakeAnthropic(model) as api:
        agent = started(live_server, project, owner, tmp_path, api)
        try:
            sign_in(page, reviewer)
            operation = proposal(page, "toolu_pay_7", agent)
            open_proposal(page, operation, ASKED)
            edit(page, {"invoice": "INV-7", "amount": 40}, COMMENT)
            expect(page.locator("#outcome .status")).to_have_text("Committed")
            assert said(agent) == "Done: Read: paid INV-7: 40"
            assert agent.wait(timeout=30) == 0
        finally:
            agent.kill()
    assert (tmp_path / "ledger.txt").read_text() == "INV-7 40\n"
    told = 'A reviewer changed your arguments to {"invoice": "INV-7", "amount": 40}.'
    assert told in str(model.requests[-1]["messages"])

    page.get_by_role("button", name="Sign out").click()
    sign_in(page, auditor)
    run = Run.objects.get(external_id="claude-payments")
    page.goto(f"/audit/runs/{run.pk}/")
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Run {run.pk} history: Completed")
    decided = decided_by_reviewer(page)
    expect(decided).to_have_count(1)
    expect(decided).to_contain_text("proposed → approved")
    expect(decided).to_contain_text(COMMENT)
    checkpoint = Checkpoint.objects.get(run=run, actor_label="reviewer", to_status="approved")
    when = checkpoint.created_at
    expect(decided.locator("time")).to_have_attribute("datetime", when.isoformat())


def test_a_rejection_in_the_browser_reaches_the_model(
    page: Page, live_server, project, owner, reviewer, tmp_path
):
    with FakeAnthropic(ScriptedModel("mcp__books__pay", ASKED, "toolu_pay_8")) as api:
        agent = started(live_server, project, owner, tmp_path, api)
        try:
            sign_in(page, reviewer)
            operation = proposal(page, "toolu_pay_8", agent)
            open_proposal(page, operation, ASKED)
            reject(page, REASON)
            done = said(agent)
            assert done.startswith("Done: Read: ")
            assert done.endswith(f": A reviewer rejected this call: {REASON}")
            assert agent.wait(timeout=30) == 0
        finally:
            agent.kill()
    assert not (tmp_path / "ledger.txt").exists()
    assert Operation.objects.get(call_id="toolu_pay_8").status == "rejected"
