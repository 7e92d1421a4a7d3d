"""The example OpenAI Agents SDK agent as a real process, steered by a reviewer in the
browser: a rejection's reason reaches the model, which tries again; an edit reaches it
too, and it pays the edited amount once; the run's history shows each decision, who
made it and when, and the turns the agent mirrored into the run. An admin cancelling the
run in the browser stops the waiting agent, which pays nothing."""

import json
from datetime import datetime

import pytest
from playwright.sync_api import Page, expect

from runs.models import AgentToken, Checkpoint, Operation, Run
from tests.browser.conftest import screenshot, sign_in
from tests.browser.deciding import decided_by_reviewer, edit, reject
from tests.processes import agent_child, eventually, said

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

REASON = "INV-7 has a 10% early-payment discount."
COMMENT = "Net of the 2 € credit note."
EDITED = 'A reviewer changed your arguments to {"invoice": "INV-7", "amount": 38}.'
DONE = f'Done: {EDITED} Result: {{"paid": "INV-7", "amount": 38}}'


def open_proposal(page: Page, call_id: str, agent, arguments: dict) -> Operation:
    """Open the agent's proposal ``call_id`` from the queue, once made."""
    operation = eventually(
        Operation.objects.filter(call_id=call_id).first, f"the proposal {call_id}", agent
    )
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Approvals").click()
    row = page.locator(f"#op-{operation.pk}")
    expect(row).to_contain_text("Agent says: Pay a supplier invoice.")
    row.get_by_role("link", name="invoices.pay").click()
    expect(page.locator("#outcome .status")).to_have_text("Proposed")
    shown = [json.dumps(arguments[name]) for name in sorted(arguments)]
    expect(page.locator("dl.arguments dd")).to_have_text(shown)
    return operation


def test_a_reviewer_steers_the_agent_in_the_browser_and_the_history_shows_who_and_when(
    page: Page, live_server, project, owner, reviewer, auditor, tmp_path
):
    token = AgentToken.issue(project=project, name="openai-agents-agent", owner=owner)[1]
    agent = agent_child("tests/openai_agents_child.py", live_server.url, token, "oa-7", tmp_path)
    try:
        assert said(agent) == "waiting for reviewers"
        sign_in(page, reviewer)
        open_proposal(page, "pay-INV-7-1", agent, {"invoice": "INV-7", "amount": 45})
        reject(page, REASON)

        # The model read the reason and tries once more with 10% off: edited to 38.
        second = open_proposal(page, "pay-INV-7-2", agent, {"invoice": "INV-7", "amount": 40})
        edit(page, {"amount": 38, "invoice": "INV-7"}, COMMENT)
        expect(page.locator("#outcome .status")).to_have_text("Committed")
        screenshot(page, "openai-agents-edited-and-committed")
        assert said(agent) == DONE
        assert agent.wait(timeout=30) == 0
    finally:
        agent.kill()

    second.refresh_from_db()
    ledger = (tmp_path / "ledger.txt").read_text().splitlines()
    assert ledger == [f"INV-7 38 [{second.idempotency_key}]"]

    page.get_by_role("button", name="Sign out").click()
    sign_in(page, auditor)
    run = Run.objects.get(external_id="oa-7")
    page.goto(f"/audit/runs/{run.pk}/")
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Run {run.pk} history: Completed")
    decided = decided_by_reviewer(page)
    expect(decided).to_have_count(2)
    expect(decided).to_contain_text(["proposed → rejected", "proposed → approved"])
    expect(decided).to_contain_text([REASON, COMMENT])
    stamps = decided.locator("time")
    for row, checkpoint in enumerate(
        Checkpoint.objects.filter(
            run=run, actor_label="reviewer", event="operation.status"
        ).order_by("seq")
    ):
        when = datetime.fromisoformat(stamps.nth(row).get_attribute("datetime"))
        assert when == checkpoint.created_at
    screenshot(page, "openai-agents-audit-run")

    # The agent's turns, mirrored into the run: what it was asked, what each tool
    # answered, what it concluded.
    page.goto(f"/runs/{run.pk}/")
    conversation = page.locator("ol.timeline li.tl-message")
    expect(conversation.filter(has_text="Pay INV-7").first).to_be_visible()
    rejected = f"pay_invoice: A reviewer rejected this call: {REASON}"
    expect(conversation.filter(has_text=rejected)).to_have_count(1)
    expect(conversation.filter(has_text=DONE)).to_have_count(1)


def test_an_admin_cancels_the_run_in_the_browser_and_the_agent_stops_unpaid(
    page: Page, live_server, project, owner, admin_user, tmp_path
):
    token = AgentToken.issue(project=project, name="openai-agents-agent", owner=owner)[1]
    agent = agent_child("tests/openai_agents_child.py", live_server.url, token, "oa-8", tmp_path)
    try:
        assert said(agent) == "waiting for reviewers"
        run = Run.objects.get(external_id="oa-8")
        sign_in(page, admin_user)
        page.goto(f"/runs/{run.pk}/")
        page.get_by_role("link", name="Cancel run…").click()
        page.get_by_label("Reason (required)").fill("The supplier was paid by hand.")
        page.get_by_role("button", name="Cancel the run").click()
        expect(page.locator(".messages")).to_have_text(
            "The run is cancelled; nothing more will fire."
        )
        assert said(agent) == "The run is cancelled: stopped."
        assert agent.wait(timeout=10) == 0
    finally:
        agent.kill()
    assert Operation.objects.get(call_id="pay-INV-7-1").status == "cancelled"
    assert not (tmp_path / "ledger.txt").exists()
