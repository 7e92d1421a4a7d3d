"""Requests at queue speed (#34 item 10), at 1280 by 800 and on a 390 by 844 phone: the
keys of an operation's page work on a request's (a to answer, a digit to choose, r to
reject, n, k and q to move), each answer opens the next request waiting, the answer
stays in reach in a bar at the bottom of the window, and a phone jumps to it. The keys
each answer costs are counted. axe-core checks every page the tests end on."""

import re

import pytest
from playwright.sync_api import Locator, Page, expect

from runs.models import HumanRequest
from tests.browser.conftest import LONG, arrived, assert_accessible, sign_in
from tests.browser.test_decision_bar import in_view, viewport
from tests.browser.test_keyboard import Keys

pytestmark = pytest.mark.django_db(transaction=True)

SIZES = [{"width": 1280, "height": 800}, {"width": 390, "height": 844}]


@pytest.fixture(params=SIZES, ids=["1280x800", "390x844"])
def size(request, page) -> dict:
    page.set_viewport_size(request.param)
    return request.param


def bar(page: Page) -> Locator:
    return page.get_by_role("region", name=re.compile(r"^Answer request \d+$"))


def clear_of_the_bar(page: Page, locator: Locator) -> None:
    """Nothing of ``locator`` is under the bar."""
    box, top = locator.bounding_box(), bar(page).bounding_box()["y"]
    assert box["y"] + box["height"] <= top, (box, top)


def at(page: Page, human: HumanRequest) -> None:
    arrived(page, re.compile(rf"/requests/{human.pk}/$"))


def said(page: Page, human: HumanRequest, done: str) -> None:
    """The page says ``done`` of ``human``, with a link back to it."""
    expect(page.locator(".messages")).to_contain_text(f"Request {human.pk} (")
    expect(page.locator(".messages")).to_contain_text(f"{done} This one waits for you next.")
    link = page.locator(".messages").get_by_role("link", name=f"Request {human.pk}")
    expect(link).to_have_attribute("href", f"/requests/{human.pk}/")


def test_each_answer_costs_a_few_keys(page, size, reviewer, ask):
    """From the queue, signing off takes 4 keys (j, Enter to open it, a, Enter), the
    next sign-off 2 (it opens by itself: a, Enter); rejecting a question 3 and the
    reason (r, the reason, Tab, Enter); a choice 2 (its digit, Enter); answering data 3
    and the answer (a, the answer, Tab past the comment, Tab, Enter: 4), and a question
    3 and the answer (a, the answer, Tab, Enter). The last stays put and q goes back to
    the empty queue."""
    first = ask("sign_off", "Sign off the plan?")
    second = ask("sign_off", "Sign off the budget?")
    rejected = ask("question", "What should the release be called?")
    chosen = ask("choice", "Which region?")
    data = ask("data", "Name the release?")
    answered = ask("question", "Anything to add?")
    sign_in(page, reviewer)
    page.goto("/approvals/")
    keys = Keys(page)

    keys.press("j", "Enter")
    at(page, first)
    keys.press("a", "Enter")
    at(page, second)
    said(page, first, "Signed off; the agent reads your answer.")
    assert keys.spent() == 4

    keys.press("a", "Enter")
    at(page, rejected)
    assert keys.spent() == 2

    keys.press("r")
    keys.type("Ask legal first.")
    keys.press("Tab", "Enter")
    at(page, chosen)
    said(page, rejected, "Rejected; the agent reads your reason.")
    assert keys.spent() == 3

    expect(bar(page).get_by_role("link", name="Choose…")).to_be_visible()
    viewport(page, f"request-flow-choice-{size['width']}")
    keys.press("2", "Enter")
    at(page, data)
    said(page, chosen, "Chosen; the agent reads your choice.")
    assert keys.spent() == 2

    keys.press("a")
    keys.type("Blue Heron")
    keys.press("Tab", "Tab", "Enter")
    at(page, answered)
    assert keys.spent() == 4

    keys.press("a")
    keys.type("Ship it on Monday.")
    keys.press("Tab", "Enter")
    expect(page.locator(".messages")).to_have_text("Answered; the agent reads your answer.")
    at(page, answered)  # Nothing else waits: the page of the one answered.
    assert keys.spent() == 3
    assert_accessible(page)

    keys.press("q")
    expect(page.locator("#queue .empty")).to_contain_text("Nothing is waiting for a decision")
    outcomes = HumanRequest.objects.order_by("pk").values_list("status", "answer_kind", "answer")
    assert list(outcomes) == [
        ("answered", "approve", None),
        ("answered", "approve", None),
        ("rejected", "reject", None),
        ("answered", "choose", "us-east"),
        ("answered", "answer", "Blue Heron"),
        ("answered", "answer", "Ship it on Monday."),
    ]
    assert HumanRequest.objects.get(pk=rejected.pk).comment == "Ask legal first."


def test_n_and_k_walk_the_requests_forward_and_back(page, reviewer, ask):
    first, second, third = (ask("sign_off", f"Step {n}?") for n in range(1, 4))
    sign_in(page, reviewer)
    page.goto(f"/requests/{first.pk}/")
    for key, then in [("n", second), ("n", third), ("n", first), ("k", third), ("k", second)]:
        page.keyboard.press(key)
        at(page, then)


def test_the_keys_do_nothing_inside_a_field_or_with_a_modifier(page, reviewer, ask):
    human = ask("choice", "Which region?")
    ask("sign_off", "Another?")
    sign_in(page, reviewer)
    page.goto(f"/requests/{human.pk}/")
    comment = page.locator("form.answer-choose").get_by_label("Comment (optional)")
    comment.focus()
    page.keyboard.type("n 2 r")
    expect(comment).to_have_value("n 2 r")
    expect(comment).to_be_focused()
    page.locator("h1").click()
    page.keyboard.press("Control+2")
    page.keyboard.press("Alt+n")
    at(page, human)
    assert HumanRequest.objects.get(pk=human.pk).status == "open"


def test_the_answer_stays_in_reach_on_a_long_request(page, size, reviewer, long_sign_off):
    human = long_sign_off
    sign_in(page, reviewer)
    page.goto(f"/requests/{human.pk}/")
    assert page.evaluate("document.documentElement.scrollHeight") > 2 * size["height"]
    assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")
    sign_off = bar(page).get_by_role("button", name="Sign off")
    reject = bar(page).get_by_role("link", name="Reject")
    for fraction in (0, 0.5, 1):
        page.evaluate(f"window.scrollTo(0, document.documentElement.scrollHeight * {fraction})")
        in_view(sign_off, size)
        in_view(reject, size)
    clear_of_the_bar(page, page.locator(".site-footer"))
    page.evaluate("window.scrollTo(0, 0)")
    viewport(page, f"request-bar-{size['width']}")
    # The comment written in the page's form goes with the bar's Sign off.
    page.locator("form.answer-sign_off").get_by_label("Comment (optional)").fill("Go ahead")

    sign_off.click()

    expect(page.locator(".messages")).to_have_text("Signed off; the agent reads your answer.")
    expect(bar(page)).to_have_count(0)
    human.refresh_from_db()
    assert (human.answer_kind, human.comment) == ("approve", "Go ahead")


@pytest.mark.parametrize(
    ("kind", "main", "field"),
    [
        ("question", "Answer", "Your answer"),
        ("data", "Answer", "Your answer"),
        ("choice", "Choose…", "eu-west"),
    ],
)
def test_the_bar_puts_the_focus_where_the_answer_is_given(
    page, size, reviewer, ask, kind, main, field
):
    human = ask(kind, "Tell us?", context="\n\n".join([LONG * 4] * 8))
    sign_in(page, reviewer)
    page.goto(f"/requests/{human.pk}/")
    answer = page.locator("form.decision").first  # The request's way to accept.
    target = (
        answer.get_by_role("button", name=field) if kind == "choice" else answer.get_by_label(field)
    )

    bar(page).get_by_role("link", name=main).click()

    expect(target).to_be_focused()
    in_view(target, size)
    clear_of_the_bar(page, target)

    bar(page).get_by_role("link", name="Reject").click()
    reason = page.locator("form.answer-reject").get_by_label("Reason (required)")
    expect(reason).to_be_focused()
    clear_of_the_bar(page, reason)
    page.keyboard.type("Not ours to say.")
    page.keyboard.press("Tab")
    reject = page.locator("form.answer-reject").get_by_role("button", name="Reject")
    expect(reject).to_be_focused()
    clear_of_the_bar(page, reject)
    page.keyboard.press("Enter")
    expect(page.locator("#outcome .status")).to_have_text("Rejected")


def test_a_phone_jumps_to_the_answer(page, reviewer, ask):
    """At 390 by 844 the answer comes after the request: a link at the top goes to it,
    and the next Tab is in the answer's box. A desktop shows it beside the request."""
    human = ask("question", "What should the release be called?", context=LONG * 20)
    page.set_viewport_size(SIZES[1])
    sign_in(page, reviewer)
    page.goto(f"/requests/{human.pk}/")
    box = page.locator("form.answer-text").get_by_label("Your answer")
    expect(box).not_to_be_in_viewport()
    jump = page.get_by_role("link", name="Go to the answer")
    in_view(jump, SIZES[1])

    jump.click()

    expect(page.get_by_role("heading", name="Answer", exact=True)).to_be_in_viewport()
    page.keyboard.press("Tab")
    expect(box).to_be_focused()
    in_view(box, SIZES[1])
    clear_of_the_bar(page, box)
    page.set_viewport_size(SIZES[0])
    expect(jump).not_to_be_visible()


def test_without_javascript_the_bar_still_answers(browser, live_server, reviewer, ask):
    first, second = ask("sign_off", "Sign off the plan?"), ask("question", "Name it?")
    context = browser.new_context(
        base_url=live_server.url, java_script_enabled=False, viewport=SIZES[1]
    )
    page = context.new_page()
    sign_in(page, reviewer)
    page.goto(f"/requests/{first.pk}/")

    bar(page).get_by_role("button", name="Sign off").click()

    at(page, second)
    said(page, first, "Signed off; the agent reads your answer.")
    bar(page).get_by_role("link", name="Reject").click()
    expect(page.locator("form.answer-reject").get_by_label("Reason (required)")).to_be_visible()
    context.close()
