"""One Reject (#34 item 14), at 1280 by 800 and on a 390 by 844 phone. An operation's
page offers a single Reject, whose box says the agent reads the reason (there is no
"Reject with reply" beside it). A sign-off is rejected as every other request is, under
its own Reject with a box of its own: r, the reason, Tab and Enter reject it and never
sign it off, and the bar's Reject leads there. The keys are counted; axe-core checks
every page the tests end on."""

import re

import pytest
from playwright.sync_api import expect

from runs.models import Decision, HumanRequest, Operation
from tests.browser.conftest import arrived, sign_in
from tests.browser.test_decision_bar import in_view, viewport
from tests.browser.test_keyboard import Keys
from tests.browser.test_request_flow import bar, clear_of_the_bar

pytestmark = pytest.mark.django_db(transaction=True)

SIZES = [{"width": 1280, "height": 800}, {"width": 390, "height": 844}]
REASON = "Reason (required): the agent reads it"


@pytest.fixture(params=SIZES, ids=["1280x800", "390x844"])
def size(request, page) -> dict:
    page.set_viewport_size(request.param)
    return request.param


def test_an_operation_has_one_reject_whose_reason_the_agent_reads(
    page, size, reviewer, propose, accounts
):
    """r, the reason, Tab, Enter: 3 keys and the reason, as a rejection of kind reject
    whose reason the agent reads."""
    op = propose("call-1")
    sign_in(page, reviewer)
    page.goto(f"/operations/{op.pk}/")
    decide = page.locator("section.decide")
    expect(decide.locator("details.more summary")).to_have_text(["Edit and approve", "Reject"])
    expect(page.get_by_text(re.compile("reply", re.I))).to_have_count(0)
    keys = Keys(page)

    keys.press("r")
    reason = decide.get_by_label(REASON, exact=True)
    expect(reason).to_be_focused()
    keys.type("Paid by hand on Friday.")
    keys.press("Tab")
    expect(page.locator("#reject-form").get_by_role("button", name="Reject")).to_be_focused()
    viewport(page, f"one-reject-operation-{size['width']}")
    keys.press("Enter")

    expect(page.locator(".messages")).to_have_text("Rejected; the agent reads your reason.")
    assert keys.spent() == 3
    decision = Decision.objects.get(operation=op)
    assert (decision.kind, decision.comment) == ("reject", "Paid by hand on Friday.")
    assert Operation.objects.get(pk=op.pk).result == {
        "decision": "rejected",
        "reason": "Paid by hand on Friday.",
    }


def test_a_sign_off_is_rejected_in_3_keys_and_the_reason(page, size, reviewer, ask):
    """The operation habit on a sign-off: r puts the focus in Reject's own reason, Tab
    reaches Reject (not Sign off), Enter rejects it and the next request opens."""
    first, second = ask("sign_off", "Sign off the plan?"), ask("sign_off", "Sign off the budget?")
    sign_in(page, reviewer)
    page.goto(f"/requests/{first.pk}/")
    expect(page.locator(".keys")).to_contain_text("a sign off · r reject · n next")
    keys = Keys(page)

    keys.press("r")
    reason = page.locator("form.answer-reject").get_by_label(REASON, exact=True)
    expect(reason).to_be_focused()
    keys.type("Too risky before the audit.")
    keys.press("Tab")
    expect(page.locator("form.answer-reject").get_by_role("button", name="Reject")).to_be_focused()
    viewport(page, f"one-reject-sign-off-{size['width']}")
    keys.press("Enter")

    arrived(page, re.compile(rf"/requests/{second.pk}/$"))
    expect(page.locator(".messages")).to_contain_text(
        f"Request {first.pk} (sign-off): Rejected; the agent reads your reason."
    )
    assert keys.spent() == 3
    first.refresh_from_db()
    assert (first.status, first.answer_kind, first.comment) == (
        "rejected",
        "reject",
        "Too risky before the audit.",
    )
    assert HumanRequest.objects.get(pk=second.pk).status == "open"


def test_the_bar_of_a_long_sign_off_leads_to_its_reject(page, size, reviewer, long_sign_off):
    human = long_sign_off
    sign_in(page, reviewer)
    page.goto(f"/requests/{human.pk}/")
    expect(bar(page).get_by_role("button")).to_have_text(["Sign off"])
    link = bar(page).get_by_role("link", name="Reject")
    in_view(link, size)

    link.click()

    reason = page.locator("form.answer-reject").get_by_label(REASON, exact=True)
    expect(reason).to_be_focused()
    in_view(reason, size)
    clear_of_the_bar(page, reason)
    page.keyboard.type("Not before the audit.")
    page.keyboard.press("Tab")
    reject = page.locator("form.answer-reject").get_by_role("button", name="Reject")
    expect(reject).to_be_focused()
    clear_of_the_bar(page, reject)
    page.keyboard.press("Enter")

    expect(page.locator("#outcome .status")).to_have_text("Rejected")
    expect(page.locator("#outcome")).to_contain_text("Reason: “Not before the audit.”")
    human.refresh_from_db()
    assert (human.answer_kind, human.comment) == ("reject", "Not before the audit.")
