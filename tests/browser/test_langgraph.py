"""The example LangGraph agent as a real process, steered by a reviewer in the browser:
the graph's ``interrupt()`` question, answered in the page, resumes the thread with that
answer; a rejection's reason and an edit reach the model, which completes; an auditor
reads every LangGraph checkpoint of the thread and every decision on the run's page.
A plain approval lets a second agent pay exactly what it proposed."""

import json

import pytest
from playwright.sync_api import Page, expect

from graphs.models import GraphCheckpoint
from runs.models import AgentToken, HumanRequest, Operation, Run
from tests.browser.conftest import screenshot, sign_in
from tests.browser.deciding import approve, decided_by_reviewer, edit, reject
from tests.langgraph_helpers import agent_process, choose, conversation
from tests.processes import eventually, said

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

THREAD = "invoices-13"
REASON = "INV-7 has a 10% early-payment discount."
COMMENT = "Net of the 2 € credit note."
# The model's arguments as a reviewer edited them, in the model's order.
EDITED = 'A reviewer changed your arguments to {"invoice": "INV-7", "amount": 38}.'
EDIT_TEXT = f'{EDITED} Result: {{"paid": "INV-7", "amount": 38}}'


def proposal(page: Page, call_id: str, agent) -> Operation:
    """The agent's proposal ``call_id``, once made, as the queue shows it."""
    operation = eventually(
        Operation.objects.filter(call_id=call_id).first, f"the proposal {call_id}", agent
    )
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Approvals").click()
    row = page.locator(f"#op-{operation.pk}")
    expect(row).to_contain_text("invoices.pay")
    expect(row).to_contain_text("Agent says: Pay a supplier invoice.")
    expect(row).to_contain_text("0 of 1")
    return operation


def open_proposal(page: Page, operation: Operation, arguments: dict) -> None:
    """Open the proposal from the queue: it shows the model's ``arguments``."""
    page.locator(f"#op-{operation.pk}").get_by_role("link", name="invoices.pay").click()
    expect(page.locator("#outcome .status")).to_have_text("Proposed")
    expect(page.locator("dl.arguments dt")).to_have_text(sorted(arguments))
    shown = [json.dumps(arguments[name]) for name in sorted(arguments)]
    expect(page.locator("dl.arguments dd")).to_have_text(shown)


def test_a_reviewer_steers_the_graph_in_the_browser_and_an_auditor_reads_it(
    page: Page, live_server, project, owner, reviewer, auditor, tmp_path
):
    token = AgentToken.issue(project=project, name="langgraph-agent", owner=owner)[1]
    options = ["--checkpointer", "oversight", "--project", project.slug]
    agent = agent_process(live_server.url, token, THREAD, tmp_path, *options)
    try:
        assert said(agent) == "waiting for reviewers"
        sign_in(page, reviewer)
        page.goto("/approvals/")
        question = HumanRequest.objects.get(run__external_id=THREAD)
        row = page.locator(f"#request-{question.pk}")
        expect(row).to_contain_text("Choose one of 2")
        row.get_by_role("link", name="Which invoice should I pay?").click()
        expect(page.locator(".choice-list li")).to_have_text(["INV-42", "INV-7"])
        screenshot(page, "langgraph-question")
        answer = page.locator("form.answer-choose")
        answer.get_by_label("Comment (optional)").fill("INV-42 waits for its credit note.")
        answer.get_by_role("button", name="INV-7").click()
        expect(page.locator(".messages")).to_have_text("Chosen; the agent reads your choice.")
        expect(page.locator("#answer")).to_contain_text("Choose by reviewer")

        # The thread resumed with the answer: the model proposes to pay INV-7, 45.
        first = proposal(page, "pay-INV-7-1", agent)
        open_proposal(page, first, {"invoice": "INV-7", "amount": 45})
        reject(page, REASON)
        expect(page.locator("#outcome .status")).to_have_text("Rejected")

        # The model read the reason and tries once more with 10% off.
        second = proposal(page, "pay-INV-7-2", agent)
        open_proposal(page, second, {"invoice": "INV-7", "amount": 40})
        shown = {"amount": 40, "invoice": "INV-7"}
        edit(page, {"amount": 38, "invoice": "INV-7"}, COMMENT, shown)
        diff = page.get_by_label("Changes from the proposal")
        expect(diff.locator("span.del")).to_have_text(['-   "amount": 40,'])
        expect(diff.locator("span.add")).to_have_text(['+   "amount": 38,'])

        # The agent pays the edited amount; the panel follows it to the end.
        expect(page.locator("#outcome .status")).to_have_text("Committed")
        screenshot(page, "langgraph-edited-and-committed")
        assert said(agent) == f"Done: {EDIT_TEXT}"
        assert agent.wait(timeout=30) == 0
    finally:
        agent.kill()

    second.refresh_from_db()
    ledger = (tmp_path / "ledger.txt").read_text().splitlines()
    assert ledger == [f"INV-7 38 [{second.idempotency_key}]"]
    calls = Operation.objects.order_by("pk").values_list("call_id", "status", "arguments")
    assert list(calls) == [
        ("pay-INV-7-1", "rejected", {"amount": 45, "invoice": "INV-7"}),
        ("pay-INV-7-2", "committed", {"amount": 38, "invoice": "INV-7"}),
    ]
    # What the model read, from the thread's last checkpoint in Oversight's database.
    assert conversation(project, THREAD) == [
        ("human", "Pay INV-7"),
        ("ai", [("pay-INV-7-1", {"invoice": "INV-7", "amount": 45})]),
        ("tool", "pay-INV-7-1", "error", f"A reviewer rejected this call: {REASON}"),
        ("ai", [("pay-INV-7-2", {"invoice": "INV-7", "amount": 40})]),
        ("tool", "pay-INV-7-2", "success", EDIT_TEXT),
        ("ai", f"Done: {EDIT_TEXT}"),
    ]

    page.get_by_role("button", name="Sign out").click()
    sign_in(page, auditor)
    run = Run.objects.get(external_id=THREAD)
    page.goto(f"/audit/runs/{run.pk}/")
    expect(page).to_have_title(f"Run {run.pk} history · Oversight")
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Run {run.pk} history: Completed")

    # Every decision, in the run's chain, by whom and why.
    decided = decided_by_reviewer(page, r"(request|operation)\.status")
    expect(decided).to_have_count(3)
    expect(decided).to_contain_text(
        ["open → answered", "proposed → rejected", "proposed → approved"]
    )
    expect(decided).to_contain_text(["INV-42 waits for its credit note.", REASON, COMMENT])

    # Every LangGraph checkpoint of the thread, newest first; the newest holds what the
    # model read.
    stored = GraphCheckpoint.objects.filter(project=project, thread_id=THREAD)
    newest_first = list(stored.order_by("-checkpoint_id").values_list("checkpoint_id", flat=True))
    graph = page.locator("#graph-state")
    expect(graph.locator("details.graph-checkpoint > summary > code")).to_have_text(newest_first)
    newest = graph.locator("details.graph-checkpoint").first
    newest.locator("summary").click()
    expect(newest).to_contain_text(f'"content": "A reviewer rejected this call: {REASON}"')
    expect(newest).to_contain_text('"content": "Pay INV-7"')
    expect(newest).to_contain_text(EDITED.replace('"', '\\"'))  # a JSON string there
    screenshot(page, "langgraph-audit-run")

    # The choice and the edit, as the checkpoints record them.
    decided.nth(0).get_by_role("link").click()
    answered = page.locator("table.diff-table tr").filter(has_text="answer.data")
    expect(answered).to_contain_text('"INV-7"')
    page.go_back()
    decided.nth(2).get_by_role("link").click()
    expect(page.locator(".facts").first).to_contain_text("edit by reviewer on arguments")
    expect(page.locator(".facts").first).to_contain_text(COMMENT)


def test_an_approval_in_the_browser_pays_what_the_model_proposed(
    page: Page, live_server, project, owner, reviewer, tmp_path
):
    token = AgentToken.issue(project=project, name="langgraph-agent", owner=owner)[1]
    agent = agent_process(live_server.url, token, "invoices-42", tmp_path)
    try:
        assert said(agent) == "waiting for reviewers"
        choose("invoices-42", reviewer, "INV-42")
        sign_in(page, reviewer)
        operation = proposal(page, "pay-INV-42-1", agent)
        open_proposal(page, operation, {"invoice": "INV-42", "amount": 120})
        approve(page)
        expect(page.locator("#outcome .status")).to_have_text("Committed")
        assert said(agent) == 'Done: {"paid": "INV-42", "amount": 120}'
        assert agent.wait(timeout=30) == 0
    finally:
        agent.kill()
    operation.refresh_from_db()
    ledger = (tmp_path / "ledger.txt").read_text().splitlines()
    assert ledger == [f"INV-42 120 [{operation.idempotency_key}]"]
    assert (operation.status, operation.arguments) == (
        "committed",
        {"amount": 120, "invoice": "INV-42"},
    )
    assert operation.run.status == Run.Status.COMPLETED
