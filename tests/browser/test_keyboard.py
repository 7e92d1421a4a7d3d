"""Deciding by keyboard alone: the Approve button is a Tab away and shows its focus."""

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import screenshot, sign_in

pytestmark = pytest.mark.django_db(transaction=True)

FOCUSED = """() => {
  const el = document.activeElement;
  const style = getComputedStyle(el);
  return {
    tag: el.tagName,
    type: el.type || "",
    text: el.textContent.trim(),
    outlineStyle: style.outlineStyle,
    outlineWidth: style.outlineWidth,
    focusVisible: el.matches(":focus-visible"),
  };
}"""


def test_approve_button_is_reached_with_tab_and_shows_focus(page, reviewer, propose):
    op = propose()
    sign_in(page, reviewer)
    page.goto(f"/operations/{op.pk}/")
    comment = page.locator("form.decision-approve").get_by_label("Comment (optional)")
    comment.focus()
    expect(comment).to_be_focused()

    page.keyboard.press("Tab")

    approve = page.locator("form.decision-approve").get_by_role("button", name="Approve")
    expect(approve).to_be_focused()
    focused = page.evaluate(FOCUSED)
    assert (focused["tag"], focused["type"], focused["text"]) == ("BUTTON", "submit", "Approve")
    assert focused["focusVisible"]
    assert focused["outlineStyle"] != "none"
    assert focused["outlineWidth"] not in ("", "0px")
    approve.scroll_into_view_if_needed()
    screenshot(page, "operation-approve-focused")

    page.keyboard.press("Enter")
    expect(page.locator(".messages")).to_have_text("Approved; a worker carries it out now.")
    expect(page.locator("#outcome .status")).to_have_text("Approved")


def test_first_tab_stop_is_the_skip_link(page, reviewer, propose):
    op = propose()
    sign_in(page, reviewer)
    page.goto(f"/operations/{op.pk}/")

    page.keyboard.press("Tab")

    skip = page.get_by_role("link", name="Skip to content")
    expect(skip).to_be_focused()
    expect(skip).to_be_in_viewport()
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(rf"/operations/{op.pk}/#main$"))


def test_a_refused_decision_puts_the_focus_on_what_to_fix(page, reviewer, propose, accounts):
    """Reject without a reason: the page comes back titled "Error: …", with the focus in
    the reason field, which names its error; a screen reader reads both at once."""
    op = propose()
    sign_in(page, reviewer)
    page.goto(f"/operations/{op.pk}/")
    page.locator("details.more summary").get_by_text("Reject", exact=True).click()
    page.locator("form.decision-reject").get_by_role("button", name="Reject").click()

    expect(page).to_have_title(re.compile(r"^Error: ledger\.transfer · operation"))
    reason = page.locator("form.decision-reject").get_by_label("Reason (required)")
    expect(reason).to_be_focused()
    expect(reason).to_have_attribute("aria-invalid", "true")
    described = reason.get_attribute("aria-describedby")
    expect(page.locator(f"#{described}")).to_have_text("Say why you reject it.")
    screenshot(page, "refused-decision-focus")
