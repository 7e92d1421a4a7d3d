"""A reviewer answers an agent's question in the browser: it appears in the live queue
beside operations, the page shows the agent's words safely, and the answer reaches
the agent through the API."""

import re
from concurrent.futures import ThreadPoolExecutor

import pytest
from playwright.sync_api import expect

from runs.services import requests as service
from tests.api_helpers import Api
from tests.browser.conftest import screenshot, sign_in
from tests.conftest import AGENT

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_reviewer_answers_a_question_from_the_queue(page, reviewer, run, agent_token):
    sign_in(page, reviewer)
    page.goto("/approvals/")
    expect(page.locator("#nav-pending")).to_have_text("0")

    human, _ = service.ask(
        run=run,
        prompt="Which region should the cluster go to?",
        context="Latency **matters** more than cost.\n\n<script>window.pwned = 1</script>",
        choices=["eu-west", "us-east"],
        actor=AGENT,
        token=agent_token,
    )

    # The queue polls every 3 s and swaps the request in by itself.
    row = page.locator(f"#request-{human.pk}")
    expect(row).to_contain_text("Which region should the cluster go to?")
    expect(row).to_contain_text("Choose one of 2")
    expect(page.locator("#nav-pending")).to_have_text("1")

    row.get_by_role("link", name="Which region should the cluster go to?").click()
    expect(page).to_have_url(re.compile(rf"/requests/{human.pk}/$"))
    expect(page.locator(".context strong")).to_have_text("matters")
    expect(page.locator(".context")).to_contain_text("<script>window.pwned = 1</script>")
    assert page.evaluate("() => window.pwned === undefined")
    screenshot(page, "request-choice")

    page.locator("form.answer-choose").get_by_label("Comment (optional)").fill("Users are there")
    page.get_by_role("button", name="us-east").click()

    expect(page.locator(".messages")).to_have_text("Chosen; the agent reads your choice.")
    expect(page.locator("#outcome .status")).to_have_text("Answered")
    expect(page.locator("#answer")).to_contain_text("Choose by reviewer")
    expect(page.locator("#answer")).to_contain_text("us-east")

    # Reading a request is an async view: the test client runs it in an event loop of
    # its own, which it cannot do in this thread, where Playwright's loop runs.
    with ThreadPoolExecutor(1) as agent:
        read = agent.submit(Api(agent_token.plain).get, f"/requests/{human.pk}").result()
    body = read.json()
    assert body["status"] == "answered"
    assert (body["answer"]["kind"], body["answer"]["data"], body["answer"]["by"]) == (
        "choose",
        "us-east",
        "reviewer",
    )
    assert body["answer"]["comment"] == "Users are there"


def test_a_rejection_without_a_reason_is_a_form_error(page, reviewer, run, agent_token):
    human, _ = service.ask(run=run, prompt="Sign off the plan?", actor=AGENT, token=agent_token)
    sign_in(page, reviewer)
    page.goto(f"/requests/{human.pk}/")

    page.locator("details.more summary", has_text="Reject").click()
    page.locator("form.answer-reject").get_by_role("button", name="Reject").click()

    expect(page.locator("form.answer-reject .field-error")).to_have_text("Say why you reject it.")
    page.locator("form.answer-reject").get_by_label("Reason (required)").fill("Too risky")
    page.locator("form.answer-reject").get_by_role("button", name="Reject").click()
    expect(page.locator("#outcome .status")).to_have_text("Rejected")
    expect(page.locator("#outcome")).to_contain_text("Reason: “Too risky”")
