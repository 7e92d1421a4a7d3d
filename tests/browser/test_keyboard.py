"""Deciding by keyboard alone: the Approve button is a Tab away and shows its focus; a
refused decision focuses what to fix; single keys work the queue to empty on a phone,
never inside a field, and can be turned off; each kind of decision costs a few keys,
counted."""

import json
import re

import pytest
from playwright.sync_api import expect

from runs.models import Operation
from tests.browser.conftest import arrived, screenshot, sign_in
from tests.helpers import decide_on

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


def test_approve_button_is_reached_with_tab_and_shows_focus(page, reviewer, propose, accounts):
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
    arrived(page, re.compile(rf"/operations/{op.pk}/#main$"))


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


def no_sideways_scroll(page) -> None:
    assert page.evaluate("document.documentElement.scrollWidth <= innerWidth"), page.url


def test_a_reviewer_works_the_queue_to_empty_by_keyboard_on_a_phone(
    page, reviewer, reviewer2, propose
):
    """At 390 by 844: j to the first row, Enter to open it, a then Enter to approve, the
    next one opens by itself, r, the reason, Tab, Enter to reject it, q back to the empty
    queue; meanwhile another reviewer decides a third, and the queue, refreshing under
    the focused row, keeps the focus where it was and says what changed."""
    first, second, third = propose("call-1"), propose("call-2"), propose("call-3")
    page.set_viewport_size({"width": 390, "height": 844})
    sign_in(page, reviewer)
    page.goto("/approvals/")
    no_sideways_scroll(page)
    page.keyboard.press("j")
    expect(page.locator(f"#op-{first.pk}-link")).to_be_focused()

    decide_on(third, reviewer2, "reject", comment="Duplicate of call-1.")
    expect(page.locator(f"#op-{third.pk}")).to_have_count(0)  # the queue refreshed
    expect(page.locator(f"#op-{first.pk}-link")).to_be_focused()
    expect(page.locator("#queue-status")).to_have_text("1 removed, 2 items waiting")

    page.keyboard.press("Enter")
    arrived(page, re.compile(rf"/operations/{first.pk}/$"))
    no_sideways_scroll(page)
    page.keyboard.press("a")
    page.keyboard.press("Enter")
    arrived(page, re.compile(rf"/operations/{second.pk}/$"))
    expect(page.locator(".messages")).to_contain_text(f"Operation {first.pk} (ledger.transfer)")
    no_sideways_scroll(page)
    page.keyboard.press("r")
    page.keyboard.type("Not this month.")
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    expect(page.locator(".messages")).to_have_text("Rejected; the agent reads your reason.")
    arrived(page, re.compile(rf"/operations/{second.pk}/$"))  # nothing else waits
    page.keyboard.press("q")
    expect(page.locator("#queue .empty")).to_contain_text("Nothing is waiting for a decision")
    no_sideways_scroll(page)
    screenshot(page, "phone-queue-empty")

    statuses = {op.call_id: op.status for op in Operation.objects.all()}
    assert statuses == {"call-1": "approved", "call-2": "rejected", "call-3": "rejected"}


def test_the_keys_do_nothing_inside_a_field_or_once_turned_off(page, reviewer, propose, accounts):
    op = propose()
    sign_in(page, reviewer)
    page.goto(f"/operations/{op.pk}/")
    comment = page.locator("form.decision-approve").get_by_label("Comment (optional)")
    comment.focus()
    page.keyboard.type("a quiet remark")
    expect(comment).to_have_value("a quiet remark")
    expect(comment).to_be_focused()

    page.goto("/account/")
    page.get_by_label("Keyboard shortcuts", exact=False).uncheck()
    page.get_by_role("button", name="Save").click()
    page.goto(f"/operations/{op.pk}/")
    expect(page.locator(".keys")).to_have_count(0)
    page.keyboard.press("r")
    expect(
        page.locator("form.decision-reject").get_by_label("Reason (required)")
    ).not_to_be_visible()


def test_when_the_focused_row_leaves_the_queue_the_next_one_takes_the_focus(
    page, reviewer, reviewer2, propose
):
    first, second = propose("call-1"), propose("call-2")
    sign_in(page, reviewer)
    page.goto("/approvals/")
    page.keyboard.press("j")
    expect(page.locator(f"#op-{first.pk}-link")).to_be_focused()
    decide_on(first, reviewer2, "reject", comment="Another reviewer took it.")
    expect(page.locator(f"#op-{first.pk}")).to_have_count(0)
    expect(page.locator(f"#op-{second.pk}-link")).to_be_focused()
    expect(page.locator("#queue-status")).to_have_text("1 removed, 1 item waiting")


def test_n_and_k_walk_the_queue_forward_and_back(page, reviewer, propose):
    """On the queue k focuses the row before (from none, the last); on an operation n
    opens the next waiting in the queue's order and k the one before, round past
    either end: n from the oldest never comes back to it."""
    first, second, third = propose("call-1"), propose("call-2"), propose("call-3")
    sign_in(page, reviewer)
    page.goto("/approvals/")
    page.keyboard.press("k")
    expect(page.locator(f"#op-{third.pk}-link")).to_be_focused()
    page.keyboard.press("k")
    expect(page.locator(f"#op-{second.pk}-link")).to_be_focused()

    page.goto(f"/operations/{first.pk}/")
    for key, then in [("n", second), ("n", third), ("n", first), ("k", third), ("k", second)]:
        page.keyboard.press(key)
        arrived(page, re.compile(rf"/operations/{then.pk}/$"))


class Keys:
    """The keys a reviewer presses, counted (what they type is not: it is the
    decision's content, not its cost)."""

    def __init__(self, page) -> None:
        self.page, self.pressed = page, 0

    def press(self, *keys: str) -> None:
        for key in keys:
            self.page.keyboard.press(key)
            self.pressed += 1

    def type(self, text: str) -> None:
        self.page.keyboard.type(text)

    def spent(self) -> int:
        """The keys pressed since the last call."""
        spent, self.pressed = self.pressed, 0
        return spent


@pytest.mark.parametrize(
    "size", [{"width": 1280, "height": 800}, {"width": 390, "height": 844}], ids=["1280", "390"]
)
def test_each_decision_costs_a_few_keys(page, reviewer, propose, accounts, size):
    """From the queue, approving takes 4 keys (j, Enter to open, a, Enter), the next one
    2 (it opens by itself: a, Enter), rejecting 3 and the reason (r, the reason, Tab,
    Enter), editing and approving 6 and the arguments (e, Control+A, the arguments, Tab,
    Enter to preview the edit, then a, Enter)."""
    first, second, third, fourth = (propose(f"call-{n}") for n in range(1, 5))
    page.set_viewport_size(size)
    sign_in(page, reviewer)
    page.goto("/approvals/")
    keys = Keys(page)

    keys.press("j", "Enter")
    arrived(page, re.compile(rf"/operations/{first.pk}/$"))
    keys.press("a", "Enter")
    arrived(page, re.compile(rf"/operations/{second.pk}/$"))
    assert keys.spent() == 4

    keys.press("a", "Enter")
    arrived(page, re.compile(rf"/operations/{third.pk}/$"))
    assert keys.spent() == 2

    keys.press("r")
    keys.type("Not this month.")
    keys.press("Tab", "Enter")
    arrived(page, re.compile(rf"/operations/{fourth.pk}/$"))
    assert keys.spent() == 3

    keys.press("e", "Control+A")
    keys.type(json.dumps({"from": "A", "to": "B", "amount": "90.00"}))
    keys.press("Tab", "Enter")
    expect(page.get_by_role("heading", name="What it would change with your edit")).to_be_visible()
    keys.press("a", "Enter")
    expect(page.locator(".messages")).to_have_text("Approved; a worker carries it out now.")
    assert keys.spent() == 6

    statuses = dict(Operation.objects.values_list("call_id", "status"))
    assert statuses == {
        "call-1": "approved",
        "call-2": "approved",
        "call-3": "rejected",
        "call-4": "approved",
    }
    assert Operation.objects.get(call_id="call-4").arguments["amount"] == "90.00"


def test_j_passes_over_what_the_reviewer_approved(page, reviewer, propose, accounts):
    """Under a two-person rule, what they approved waits for someone else: listed last,
    and j and k go round the others only."""
    approved, first, second = propose("call-1"), propose("call-2"), propose("call-3")
    Operation.objects.filter(pk=approved.pk).update(required_approvals=2)
    decide_on(approved, reviewer)
    sign_in(page, reviewer)
    page.goto("/approvals/")
    expect(page.locator("tbody.seconds")).to_contain_text("Waiting for a second reviewer")
    focused = []
    for key in "jjjkk":
        page.keyboard.press(key)
        focused.append(page.evaluate("document.activeElement.id"))
    links = [f"op-{op.pk}-link" for op in (first, second, first, second, first)]
    assert focused == links
