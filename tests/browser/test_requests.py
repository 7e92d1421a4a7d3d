"""A reviewer answers an agent's requests in the browser: they appear in the live queue
beside operations, the page shows the agent's words safely, and the answer reaches
the agent through the API. Each of the four kinds has its own controls (#34), on a
desktop and on a phone, by mouse and by keyboard, passing axe-core's checks; a refused
answer puts the focus on what to fix."""

import re
from concurrent.futures import ThreadPoolExecutor

import pytest
from playwright.sync_api import Locator, Page, expect

from runs.models import HumanRequest
from runs.services import requests as service
from tests.api_helpers import Api
from tests.browser.conftest import arrived, assert_accessible, screenshot, sign_in
from tests.conftest import AGENT

pytestmark = pytest.mark.django_db(transaction=True)
SIZES = [(1280, 800), (390, 844)]  # a desktop, a phone
ORDER = {
    "type": "object",
    "description": "What to buy.",
    "properties": {
        "item": {"type": "string", "title": "Item", "description": "As the supplier names it"},
        "quantity": {"type": "integer", "title": "Quantity", "minimum": 1, "default": 1},
        "express": {"type": "boolean", "title": "Express delivery", "default": False},
        "colour": {"enum": ["red", "blue"], "title": "Colour"},
    },
    "required": ["item", "quantity"],
}
KINDS = {
    "question": {"kind": "question"},
    "sign_off": {},
    "choice": {"choices": ["eu-west", "us-east"]},
    "data": {"answer_schema": ORDER},
}


def asked(run, agent_token, kind: str, prompt: str = "What should the release be called?"):
    return service.ask(run=run, prompt=prompt, actor=AGENT, token=agent_token, **KINDS[kind])[0]


def read_by_the_agent(agent_token, human: HumanRequest) -> dict:
    """The request as its agent reads it. Reading is an async view: the test client runs
    it in an event loop of its own, which it cannot do in this thread, where
    Playwright's loop runs."""
    with ThreadPoolExecutor(1) as agent:
        return agent.submit(Api(agent_token.plain).get, f"/requests/{human.pk}").result().json()


def fits(page: Page) -> None:
    """No axe-core violation, and no sideways scroll."""
    assert_accessible(page)
    assert page.evaluate("document.documentElement.scrollWidth <= innerWidth"), page.url


def tab_to(page: Page, target: Locator, most: int = 40) -> None:
    """Press Tab until ``target`` has the focus, as a keyboard user would."""
    for _ in range(most):
        page.keyboard.press("Tab")
        if target.evaluate("element => element === document.activeElement"):
            return
    raise AssertionError(f"{most} Tabs never reached {target}")


def test_a_reviewer_answers_a_choice_from_the_queue(page, reviewer, run, agent_token):
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
    arrived(page, re.compile(rf"/requests/{human.pk}/$"))
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


@pytest.mark.parametrize("size", SIZES, ids=["desktop", "phone"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_each_kind_has_its_own_controls(page, reviewer, run, agent_token, kind, size):
    human = asked(run, agent_token, kind)
    page.set_viewport_size({"width": size[0], "height": size[1]})
    sign_in(page, reviewer)
    page.goto(f"/requests/{human.pk}/")
    decide = page.locator("section.decide")
    buttons = decide.get_by_role("button").filter(visible=True)
    heading, names = {
        "question": ("A question the agent asks", ["Send answer"]),
        "sign_off": ("A sign-off the agent asks", ["Sign off"]),
        "choice": ("A choice the agent asks", ["eu-west", "us-east"]),
        "data": ("Data the agent asks for", ["Send answer"]),
    }[kind]
    expect(page.get_by_role("heading", level=1)).to_have_text(heading)
    expect(buttons).to_have_text(names)
    if kind == "question":
        expect(decide.get_by_label("Your answer")).to_be_visible()
        expect(decide.get_by_label("Comment (optional)")).to_have_count(0)
    if kind == "data":
        expect(decide.get_by_label("Item (required)")).to_have_attribute(
            "aria-describedby", re.compile(r"_helptext$")
        )
        expect(decide.get_by_label("Quantity (required)")).to_have_value("1")
        expect(decide.get_by_label("Express delivery")).to_have_value("false")
        expect(decide.get_by_label("Colour")).to_have_value("")
        expect(decide.locator("summary", has_text="Answer in JSON instead")).to_be_visible()
    expect(decide.locator("details.more summary", has_text="Reject")).to_be_visible()
    fits(page)
    screenshot(page, f"request-{kind}-{size[0]}")


def test_a_question_is_answered_in_words_by_keyboard_from_the_queue(
    page, reviewer, run, agent_token
):
    """On a phone, keys only: j to the request, Enter to open it, Tab to the answer box,
    the answer, Tab and Enter to send it; the page says so, the focus is back on the
    page (not in a field, so the keys work), q goes back to the queue; the agent reads
    the text as the answer's data."""
    human = asked(run, agent_token, "question")
    page.set_viewport_size({"width": 390, "height": 844})
    sign_in(page, reviewer)
    page.goto("/approvals/")
    page.keyboard.press("j")
    expect(page.locator(f"#request-{human.pk}-link")).to_be_focused()
    page.keyboard.press("Enter")
    arrived(page, re.compile(rf"/requests/{human.pk}/$"))

    box = page.get_by_label("Your answer")
    tab_to(page, box)
    page.keyboard.type("Blue Heron")
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Send answer")).to_be_focused()
    page.keyboard.press("Enter")

    expect(page.locator(".messages")).to_have_text("Answered; the agent reads your answer.")
    expect(page.locator("#answer")).to_contain_text("Answer by reviewer")
    expect(page.locator("blockquote.answer-text")).to_have_text("Blue Heron")
    assert page.evaluate("document.activeElement === document.body")
    fits(page)
    page.keyboard.press("q")
    expect(page.locator("#queue .empty")).to_contain_text("Nothing is waiting for a decision")

    answer = read_by_the_agent(agent_token, human)["answer"]
    assert (answer["request_kind"], answer["kind"], answer["data"], answer["comment"]) == (
        "question",
        "answer",
        "Blue Heron",
        "",
    )


def test_a_sign_off_is_rejected_under_reject_and_a_missing_reason_takes_the_focus(
    page, reviewer, run, agent_token
):
    """A sign-off's Reject is the other kinds': under Reject, with its own reason."""
    human = asked(run, agent_token, "sign_off", "Sign off the plan?")
    page.set_viewport_size({"width": 390, "height": 844})
    sign_in(page, reviewer)
    page.goto(f"/requests/{human.pk}/")
    expect(page.locator("form.answer-sign_off").get_by_label("Comment (optional)")).to_be_visible()

    page.locator("details.more summary", has_text="Reject").click()
    page.locator("form.answer-reject").get_by_role("button", name="Reject").click()

    expect(page).to_have_title(re.compile(r"^Error: Request"))
    reason = page.locator("form.answer-reject").get_by_label("Reason (required)")
    expect(reason).to_be_focused()
    expect(reason).to_have_attribute("aria-invalid", "true")
    expect(page.locator("form.answer-reject .field-error")).to_have_text("Say why you reject it.")
    fits(page)
    page.keyboard.type("Too risky")
    page.keyboard.press("Tab")
    expect(page.locator("form.answer-reject").get_by_role("button", name="Reject")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("#outcome .status")).to_have_text("Rejected")
    expect(page.locator("#outcome")).to_contain_text("Reason: “Too risky”")


def test_a_question_is_rejected_under_reject_with_a_reason(page, reviewer, run, agent_token):
    human = asked(run, agent_token, "question")
    sign_in(page, reviewer)
    page.goto(f"/requests/{human.pk}/")

    page.locator("details.more summary", has_text="Reject").click()
    page.locator("form.answer-reject").get_by_role("button", name="Reject").click()

    reason = page.locator("form.answer-reject").get_by_label("Reason (required)")
    expect(reason).to_be_focused()
    expect(page.locator("form.answer-reject .field-error")).to_have_text("Say why you reject it.")
    fits(page)
    reason.fill("Ask legal first")
    page.locator("form.answer-reject").get_by_role("button", name="Reject").click()
    expect(page.locator("#outcome .status")).to_have_text("Rejected")
    expect(page.locator("#outcome")).to_contain_text("Reason: “Ask legal first”")


@pytest.mark.parametrize("size", SIZES, ids=["desktop", "phone"])
def test_data_is_answered_in_fields_and_a_refused_field_takes_the_focus(
    page, reviewer, run, agent_token, size
):
    human = asked(run, agent_token, "data", "What should we order?")
    page.set_viewport_size({"width": size[0], "height": size[1]})
    sign_in(page, reviewer)
    page.goto(f"/requests/{human.pk}/")
    form = page.locator("form.answer-fields")
    form.get_by_label("Item (required)").fill("Printer paper")
    form.get_by_label("Quantity (required)").fill("0")
    form.get_by_label("Colour").select_option("blue")
    form.get_by_role("button", name="Send answer").click()

    # The schema's minimum, checked on the server, comes back on the field.
    quantity = form.get_by_label("Quantity (required)")
    expect(quantity).to_be_focused()
    expect(quantity).to_have_attribute("aria-invalid", "true")
    expect(form.locator(".field-error")).to_have_text("0 is less than the minimum of 1")
    expect(form.get_by_label("Item (required)")).to_have_value("Printer paper")
    assert HumanRequest.objects.get(pk=human.pk).status == "open"
    fits(page)
    screenshot(page, f"request-data-refused-{size[0]}")

    page.keyboard.press("ControlOrMeta+a")
    page.keyboard.type("12")
    form.get_by_label("Express delivery").select_option("Yes")
    form.get_by_role("button", name="Send answer").click()

    expect(page.locator(".messages")).to_have_text("Answered; the agent reads your answer.")
    expect(page.locator("#outcome pre.code")).to_contain_text('"quantity": 12')
    fits(page)
    answer = read_by_the_agent(agent_token, human)["answer"]
    assert (answer["request_kind"], answer["data"]) == (
        "data",
        {"item": "Printer paper", "quantity": 12, "express": True, "colour": "blue"},
    )


def test_data_may_be_answered_in_raw_json_instead(page, reviewer, run, agent_token):
    human = asked(run, agent_token, "data", "What should we order?")
    sign_in(page, reviewer)
    page.goto(f"/requests/{human.pk}/")
    page.locator("summary", has_text="Answer in JSON instead").click()
    json_form = page.locator("form.answer-json")
    json_form.get_by_label("Your answer (JSON)").fill('{"item": "Pens"}')
    json_form.get_by_role("button", name="Send answer").click()

    box = page.locator("form.answer-json").get_by_label("Your answer (JSON)")
    expect(box).to_be_focused()
    expect(page.locator("form.answer-json .field-error")).to_have_text(
        'data: "quantity" is a required property'
    )
    fits(page)
    box.fill('{"item": "Pens", "quantity": 3}')
    page.locator("form.answer-json").get_by_role("button", name="Send answer").click()
    expect(page.locator("#outcome .status")).to_have_text("Answered")
    assert HumanRequest.objects.get(pk=human.pk).answer == {"item": "Pens", "quantity": 3}
