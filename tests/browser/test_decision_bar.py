"""The decision stays in reach on an operation's page, at 1280 by 800 and on a 390 by
844 phone (#34): a bar at the bottom of the window whose Approve submits the page's own
approval form, whose Reject and Edit put the focus in the reason and the editor, and
which covers nothing the reviewer must read; Reject comes first where the preview says
the effect would fail; a decision on a preview the target moved past says what changed
and brings the focus to the new preview. axe-core checks every page the tests end on."""

import re

import pytest
from playwright.sync_api import Locator, Page, expect

from runs.models import Account, Decision, Operation
from runs.payloads import MessageKind
from runs.services.previews import preview_hash, preview_of
from runs.services.runs import append_message
from tests.browser.conftest import SCREENSHOTS, arrived, assert_accessible, sign_in
from tests.conftest import AGENT

pytestmark = pytest.mark.django_db(transaction=True)

SIZES = [{"width": 1280, "height": 800}, {"width": 390, "height": 844}]
SAID = (
    "The agent's plan, at length: check the invoice against the purchase order, the "
    "delivery note and the supplier's bank details, then pay it from the operating account. "
)
EMAIL = {"to": ["ops@example.com"], "subject": "Report", "body": "All green."}


@pytest.fixture(params=SIZES, ids=["1280x800", "390x844"])
def size(request, page) -> dict:
    page.set_viewport_size(request.param)
    return request.param


@pytest.fixture
def long_page(run, propose, accounts):
    """A transfer that could be made, on a page many screens long: a long rationale and
    ten long messages before it."""
    for n in range(10):
        append_message(
            run=run, kind=MessageKind.AGENT, payload={"text": f"{n}. {SAID * 3}"}, actor=AGENT
        )
    return lambda call_id="call-1": propose(call_id, summary="Pay invoice 42.", rationale=SAID * 8)


def bar(page: Page) -> Locator:
    return page.get_by_role("region", name=re.compile(r"^Decide on operation \d+$"))


def in_view(locator: Locator, size: dict) -> None:
    """``locator`` is whole inside the window."""
    box = locator.bounding_box()
    assert box is not None
    assert box["x"] >= 0 and box["x"] + box["width"] <= size["width"], box
    assert box["y"] >= 0 and box["y"] + box["height"] <= size["height"], box


def clear_of_the_bar(page: Page, locator: Locator) -> None:
    """Nothing of ``locator`` is under the bar."""
    box, top = locator.bounding_box(), bar(page).bounding_box()["y"]
    assert box["y"] + box["height"] <= top, (box, top)


def viewport(page: Page, name: str) -> None:
    """A picture of the window as the reviewer sees it (the bar where it stands), once
    the page passes axe-core's checks."""
    assert_accessible(page)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))


def open_operation(page: Page, reviewer, op: Operation) -> None:
    sign_in(page, reviewer)
    page.goto(f"/operations/{op.pk}/")


def test_the_approve_button_stays_in_reach_on_a_long_page(page, size, reviewer, long_page):
    op = long_page()
    open_operation(page, reviewer, op)
    assert page.evaluate("document.documentElement.scrollHeight") > 3 * size["height"]
    assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")
    approve = bar(page).get_by_role("button", name="Approve")
    in_view(approve, size)
    # While it waits, the status comes after what it would change.
    preview_at = page.locator("#preview-title").bounding_box()["y"]
    assert preview_at < page.locator("#outcome").bounding_box()["y"]

    page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight / 2)")
    in_view(approve, size)
    page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
    in_view(approve, size)
    clear_of_the_bar(page, page.locator(".site-footer"))  # The page's last line is clear.
    page.evaluate("window.scrollTo(0, 0)")
    viewport(page, f"decision-bar-{size['width']}")
    shown = page.locator("#approve-form input[name=preview_hash]").input_value()

    approve.click()

    expect(page.locator(".messages")).to_have_text("Approved; a worker carries it out now.")
    decision = Decision.objects.get(operation=op)
    assert (decision.kind, decision.preview_sha256) == ("approve", shown)
    expect(bar(page)).to_have_count(0)


def test_reject_and_edit_in_the_bar_put_the_focus_in_their_field(page, size, reviewer, long_page):
    first, second = long_page("call-1"), long_page("call-2")
    open_operation(page, reviewer, first)

    bar(page).get_by_role("link", name="Reject").click()
    reason = page.locator("#reject-form").get_by_label("Reason (required)")
    expect(reason).to_be_focused()
    in_view(reason, size)
    clear_of_the_bar(page, reason)
    page.keyboard.type("Paid already by hand.")
    page.keyboard.press("Tab")
    reject = page.locator("#reject-form").get_by_role("button", name="Reject")
    expect(reject).to_be_focused()
    clear_of_the_bar(page, reject)
    page.keyboard.press("Enter")
    arrived(page, re.compile(rf"/operations/{second.pk}/$"))

    bar(page).get_by_role("link", name="Edit").click()
    editor = page.locator("form.editor").get_by_label("Arguments (JSON)")
    expect(editor).to_be_focused()
    clear_of_the_bar(page, editor)
    page.keyboard.press("Control+A")
    page.keyboard.type('{"from": "A", "to": "B", "amount": "90.00"}')
    page.keyboard.press("Tab")
    preview = page.get_by_role("button", name="Preview the edit")
    expect(preview).to_be_focused()
    clear_of_the_bar(page, preview)  # What the focus moves to scrolls clear of the bar.
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="What it would change with your edit")).to_be_visible()
    approve = bar(page).get_by_role("button", name="Approve the edit")
    in_view(approve, size)
    approve.click()

    expect(page.locator(".messages")).to_contain_text("Approved; a worker carries it out now.")
    statuses = dict(Operation.objects.values_list("call_id", "status"))
    assert statuses == {"call-1": "rejected", "call-2": "approved"}
    assert Operation.objects.get(call_id="call-2").arguments["amount"] == "90.00"


def test_an_irreversible_approval_in_the_bar_leads_to_its_typed_confirmation(
    page, size, reviewer, propose
):
    op = propose("mail-1", action="email.send", arguments=EMAIL, rollback_kind="out_of_band")
    open_operation(page, reviewer, op)

    bar(page).get_by_role("link", name="Approve…").click()
    confirm = page.get_by_label("This cannot be undone. Type email.send to confirm")
    expect(confirm).to_be_focused()
    in_view(confirm, size)
    page.keyboard.type("email.send")
    page.keyboard.press("Enter")

    expect(page.locator(".messages")).to_have_text("Approved; a worker carries it out now.")


def test_without_javascript_the_bar_still_decides(browser, live_server, reviewer, long_page):
    first, second = long_page("call-1"), long_page("call-2")
    context = browser.new_context(
        base_url=live_server.url, java_script_enabled=False, viewport=SIZES[1]
    )
    page = context.new_page()
    open_operation(page, reviewer, first)

    bar(page).get_by_role("link", name="Reject").click()
    expect(page.locator("#reject-form").get_by_label("Reason (required)")).to_be_visible()
    page.goto(f"/operations/{first.pk}/")
    bar(page).get_by_role("button", name="Approve").click()

    expect(page.locator(".messages")).to_contain_text(f"Operation {first.pk} (ledger.transfer)")
    arrived(page, re.compile(rf"/operations/{second.pk}/$"))
    assert Operation.objects.get(pk=first.pk).status == "approved"
    context.close()


def test_where_the_transfer_would_overdraw_reject_comes_first(
    page, size, reviewer, propose, accounts
):
    op = propose("pay-1", arguments={"from": "A", "to": "B", "amount": "6000.00"})
    open_operation(page, reviewer, op)

    expect(page.locator(".preview")).to_contain_text(
        "It could not be made now: A holds 5,000.00, less than the 6,000.00 to transfer: "
        "it would leave A at -1,000.00."
    )
    links = bar(page).get_by_role("link")
    expect(links).to_have_text(["Reject", "Approve anyway", "Edit"])
    expect(links.first).to_have_class("button primary")
    in_view(links.first, size)
    expect(bar(page).get_by_role("button")).to_have_count(0)
    reject = page.locator("#reject-form").get_by_role("button", name="Reject")
    expect(reject).to_have_class("primary")
    approve = page.locator("#approve-form").get_by_role("button", name="Approve anyway")
    expect(approve).not_to_be_visible()
    page.locator("#decision").scroll_into_view_if_needed()
    viewport(page, f"decision-bar-reject-first-{size['width']}")
    page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
    clear_of_the_bar(page, page.locator(".site-footer"))

    bar(page).get_by_role("link", name="Approve anyway").click()  # one step away
    expect(page.locator("#approve-form").get_by_label("Comment (optional)")).to_be_focused()
    in_view(approve, size)
    approve.click()

    expect(page.locator(".messages")).to_have_text("Approved; a worker carries it out now.")


def test_a_changed_preview_takes_the_focus_and_says_what_changed(page, size, reviewer, long_page):
    op = long_page()
    open_operation(page, reviewer, op)
    Account.objects.filter(name="A").update(balance="4000.00")

    bar(page).get_by_role("button", name="Approve").click()

    changed = page.locator("#preview-changed")
    expect(changed).to_be_focused()
    expect(changed).to_have_text(
        re.compile(
            r"The balance of A changed since you looked: it was 5,000\.00, it is now 4,000\.00\."
            r"\s*Nothing was decided\. Look at the new preview below before you decide\."
        )
    )
    in_view(changed, size)
    expect(page).to_have_title(re.compile(r"^Error: "))
    expect(page.locator("table.balances tbody tr").first).to_contain_text("4,000.00")
    assert Operation.objects.get(pk=op.pk).status == "proposed"
    assert not Decision.objects.exists()
    viewport(page, f"decision-bar-preview-changed-{size['width']}")

    bar(page).get_by_role("button", name="Approve").click()  # now on the new preview

    expect(page.locator(".messages")).to_have_text("Approved; a worker carries it out now.")
    kept = Decision.objects.get(operation=op).preview_sha256
    assert kept == preview_hash(preview_of(Operation.objects.get(pk=op.pk)))
