"""The Agent Framework adapter as a real process, its agent's three payments decided by a
reviewer in the browser: one approved, one rejected with a reason, one edited. The model
reads each outcome (the reason and the edit included), each approved payment is made
once as approved, and an auditor reads who decided what and when on the run's page."""

import re

import pytest
from playwright.sync_api import Page, expect

from runs.models import AgentToken, Operation, Run
from tests.agent_framework_helpers import agent_process, payments
from tests.browser.conftest import screenshot, sign_in
from tests.browser.deciding import approve, decided_by_reviewer, edit, reject
from tests.client_helpers import client_for
from tests.processes import eventually, said

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

REASON = "INV-8 was paid by card last week."
COMMENT = "Net of the 5 € credit note."


def open_proposal(page: Page, call_id: str, agent) -> Operation:
    operation = eventually(
        Operation.objects.filter(call_id=call_id).first, f"the proposal {call_id}", agent
    )
    page.goto("/approvals/")
    page.locator(f"#op-{operation.pk}").get_by_role("link", name="invoices.pay").click()
    expect(page.locator("#outcome .status")).to_have_text("Proposed")
    return operation


def test_a_reviewer_approves_rejects_and_edits_the_agent_s_calls_in_the_browser(
    page: Page, live_server, project, owner, reviewer, auditor, tmp_path
):
    token = AgentToken.issue(project=project, name="maf-agent", owner=owner)[1]
    ovs = client_for(live_server, token)
    run_id = ovs.start_run(ovs.open_session(title="Payments")["id"], goal="Pay the supplier")["id"]
    agent = agent_process(live_server.url, token, run_id, tmp_path, "--start", "--three")
    try:
        assert said(agent) == "waiting for reviewers"
        sign_in(page, reviewer)

        open_proposal(page, "pay-1", agent)
        expect(page.locator("dl.arguments dd")).to_have_text(["45", '"INV-7"'])
        approve(page)

        open_proposal(page, "pay-2", agent)
        reject(page, REASON)

        open_proposal(page, "pay-3", agent)
        edit(page, {"invoice": "INV-9", "amount": 55}, COMMENT)
        expect(page.locator("#outcome .status")).to_have_text("Committed")
        screenshot(page, "agent-framework-edited-and-committed")

        assert said(agent) == (
            'Done: Read: {"paid": "INV-7", "amount": 45}'
            f" | A reviewer rejected this call: {REASON}"
            ' | A reviewer changed your arguments to {"invoice": "INV-9", "amount": 55}.'
            ' Result: {"paid": "INV-9", "amount": 55}'
        )
        assert agent.wait(timeout=30) == 0
    finally:
        agent.kill()
    assert sorted(payments(tmp_path / "ledger")) == ["INV-7 45", "INV-9 55"]  # in any order
    calls = Operation.objects.order_by("call_id").values_list("call_id", "status")
    assert list(calls) == [("pay-1", "committed"), ("pay-2", "rejected"), ("pay-3", "committed")]

    page.get_by_role("button", name="Sign out").click()
    sign_in(page, auditor)
    page.goto(f"/audit/runs/{run_id}/")
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Run {run_id} history: Completed")
    decided = decided_by_reviewer(page)
    expect(decided).to_have_count(3)
    expect(decided).to_contain_text(
        ["proposed → approved", "proposed → rejected", "proposed → approved"]
    )
    expect(decided.nth(1)).to_contain_text(REASON)
    expect(decided.nth(2)).to_contain_text(COMMENT)
    for row in range(3):  # when, to the second
        expect(decided.nth(row).locator("time")).to_have_attribute(
            "datetime", re.compile(r"^\d{4}-")
        )
    screenshot(page, "agent-framework-audit-run")
    assert Run.objects.get(pk=run_id).status == "completed"
