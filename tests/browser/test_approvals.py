"""A reviewer's day in the browser: the live queue, an edit-and-approve that a worker
commits, and the typed confirmation an irreversible operation demands."""

import json
import re
from decimal import Decimal

import pytest
from django.db import transaction
from playwright.sync_api import Page, expect

from runs import queue
from runs.engine.worker import Worker
from runs.models import Account, Decision, Operation
from tests.browser.conftest import arrived, screenshot, sign_in
from tests.helpers import decide_on

pytestmark = pytest.mark.django_db(transaction=True)

MARK = "window.__stillHere = true"
STILL_HERE = "() => window.__stillHere === true"


def mark_page(page: Page) -> None:
    """Tag the loaded document; the tag survives htmx swaps but not a reload."""
    page.evaluate(MARK)


def assert_not_reloaded(page: Page) -> None:
    assert page.evaluate(STILL_HERE), "the page was reloaded"


def test_new_proposal_appears_and_an_edit_is_committed(page, reviewer, propose, accounts):
    sign_in(page, reviewer)
    page.goto("/approvals/")
    queue = page.locator("#queue")
    expect(queue).to_contain_text("Nothing is waiting for a decision")
    expect(page.locator("#nav-pending")).to_have_text("0")
    mark_page(page)

    op = propose(arguments={"from": "A", "to": "B", "amount": "100.00"})

    # The queue polls every 3 s and swaps the new row in by itself.
    row = page.locator(f"#op-{op.pk}")
    expect(row).to_be_visible()
    expect(row).to_contain_text("ledger.transfer")
    expect(row).to_contain_text("Pay the supplier invoice")
    expect(row).to_contain_text("0 of 1")
    expect(queue).to_contain_text("1 operation waiting for a decision")
    expect(page.locator("#nav-pending")).to_have_text("1")
    assert_not_reloaded(page)
    screenshot(page, "approvals-queue")

    row.get_by_role("link", name="ledger.transfer").click()
    arrived(page, re.compile(rf"/operations/{op.pk}/$"))
    expect(page.locator("#outcome .status")).to_have_text("Proposed")

    page.locator("details.more summary", has_text="Edit and approve").click()
    editor = page.get_by_label("Arguments (JSON)")
    expect(editor).to_be_visible()
    shown = json.loads(editor.input_value())
    assert shown == {"amount": "100.00", "from": "A", "to": "B"}
    editor.fill(json.dumps({**shown, "amount": "250.00"}, indent=2, sort_keys=True))
    page.get_by_role("button", name="Preview the edit").click()
    expect(page.locator("table.balances tbody tr")).to_have_text(
        [re.compile(r"A\s*5,000.00\s*4,750.00"), re.compile(r"B\s*0.00\s*250.00")]
    )
    page.locator("form.decision-edit").get_by_label("Comment (optional)").fill(
        "The invoice says 250."
    )
    page.get_by_role("button", name="Approve the edited arguments").click()

    expect(page.locator(".messages")).to_have_text("Approved; a worker carries it out now.")
    expect(page.locator("#outcome .status")).to_have_text("Approved")
    expect(page.locator("#outcome")).to_contain_text("This panel updates by itself.")
    diff = page.get_by_label("Changes from the proposal")
    expect(diff.locator("span.del")).to_have_text(['-   "amount": "100.00",'])
    expect(diff.locator("span.add")).to_have_text(['+   "amount": "250.00",'])
    expect(page.locator("ul.decisions")).to_contain_text(
        re.compile("edit and approve by reviewer", re.IGNORECASE)
    )
    expect(page.locator("ul.decisions")).to_contain_text("The invoice says 250.")
    mark_page(page)

    Worker(name="browser").drain()

    # The status panel polls every 2 s until the operation reaches an end.
    expect(page.locator("#outcome .status")).to_have_text("Committed")
    expect(page.locator("#outcome")).not_to_contain_text("This panel updates by itself.")
    expect(page.locator("#outcome")).not_to_have_attribute("hx-get", "")
    assert_not_reloaded(page)
    page.locator("#outcome summary", has_text="Result the agent reads").click()
    expect(page.locator("#outcome pre")).to_contain_text("250.00")
    screenshot(page, "operation-committed")

    op.refresh_from_db()
    assert op.status == Operation.Status.COMMITTED
    assert op.arguments["amount"] == "250.00"
    assert op.decisions.get().kind == Decision.Kind.EDIT
    balances = dict(Account.objects.values_list("name", "balance"))
    assert balances == {"A": Decimal("4750.00"), "B": Decimal("250.00")}


def test_queue_title_counts_a_new_proposal(page, reviewer, propose):
    """The tab title carries the count, so a reviewer working in another tab sees that
    something arrived. The polled partial sends a fresh <title>, and htmx must apply it."""
    sign_in(page, reviewer)
    page.goto("/approvals/")
    expect(page).to_have_title("(0) Approvals · Oversight")
    mark_page(page)

    op = propose()

    expect(page.locator(f"#op-{op.pk}")).to_be_visible()
    expect(page.locator("#nav-pending")).to_have_text("1")
    expect(page).to_have_title("(1) Approvals · Oversight")
    assert_not_reloaded(page)


def test_filtered_queue_keeps_its_filter_while_polling(page, reviewer, propose):
    sign_in(page, reviewer)
    page.goto("/approvals/?risk=high")
    expect(page.get_by_label("Risk")).to_have_value("high")
    mark_page(page)

    medium = propose("call-medium", risk=Operation.Risk.MEDIUM)
    high = propose("call-high", risk=Operation.Risk.HIGH)

    expect(page.locator(f"#op-{high.pk}")).to_be_visible()
    expect(page.locator(f"#op-{high.pk}")).to_contain_text("0 of 2")
    expect(page.locator(f"#op-{medium.pk}")).to_have_count(0)
    expect(page.locator("#queue")).to_have_attribute("hx-get", "/approvals/?risk=high")
    assert_not_reloaded(page)


def test_nav_count_stays_global_on_a_filtered_queue(page, reviewer, propose):
    """The badge in the navigation counts everything waiting for me, as a full page
    load shows it; a filtered queue's poll must not overwrite it with its own count."""
    propose("call-medium", risk=Operation.Risk.MEDIUM)
    sign_in(page, reviewer)
    page.goto("/approvals/?risk=high")
    expect(page.locator("#nav-pending")).to_have_text("1")
    mark_page(page)

    high = propose("call-high", risk=Operation.Risk.HIGH)

    expect(page.locator(f"#op-{high.pk}")).to_be_visible()
    expect(page.locator("#nav-pending")).to_have_text("2")
    assert_not_reloaded(page)


def test_irreversible_approval_needs_the_action_name_typed(page, reviewer, propose):
    op = propose(
        "mail-1",
        action="email.send",
        arguments={"to": ["ops@example.com"], "subject": "Report", "body": "All green."},
        rollback_kind=Operation.RollbackKind.OUT_OF_BAND,
    )
    sign_in(page, reviewer)
    page.goto(f"/operations/{op.pk}/")
    approve = page.locator("form.decision-approve")
    confirm = approve.get_by_label("This cannot be undone. Type email.send to confirm")
    expect(confirm).to_be_visible()
    expect(confirm).to_have_value("")

    approve.get_by_role("button", name="Approve").click()

    error = approve.get_by_role("alert")
    expect(error).to_have_text("This cannot be undone: type email.send to confirm.")
    expect(page.locator("#outcome .status")).to_have_text("Proposed")
    assert not op.decisions.exists()

    approve.get_by_label("This cannot be undone. Type email.send to confirm").fill("email.send")
    approve.get_by_role("button", name="Approve").click()

    expect(page.locator(".messages")).to_have_text("Approved; a worker carries it out now.")
    expect(page.locator("#outcome .status")).to_have_text("Approved")
    expect(page.locator("section.decide")).to_contain_text(
        "This operation no longer awaits a decision."
    )
    op.refresh_from_db()
    assert op.status == Operation.Status.APPROVED
    assert op.decisions.get().reviewer == reviewer


def test_a_long_queue_says_what_changed_of_all_that_waits(
    page, reviewer, reviewer2, propose, monkeypatch
):
    """With more waiting than shown, a decided row's place is taken by the next oldest,
    which is not new; the status counts everything waiting, not the rows shown."""
    monkeypatch.setattr(queue, "QUEUE_LIMIT", 2)
    first, second, third = propose("call-1"), propose("call-2"), propose("call-3")
    sign_in(page, reviewer)
    page.goto("/approvals/")
    expect(page.locator("#queue-limit")).to_be_visible()

    decide_on(first, reviewer2, "reject", comment="Not now.")
    expect(page.locator(f"#op-{third.pk}")).to_be_visible()  # the queue refreshed
    expect(page.locator("#queue-status")).to_have_text("1 removed, 2 items waiting")

    with transaction.atomic():  # One change for the queue's next look.
        fourth = propose("call-4")
        decide_on(second, reviewer2, "reject", comment="Not now.")
    expect(page.locator(f"#op-{fourth.pk}")).to_be_visible()
    expect(page.locator("#queue-status")).to_have_text("1 removed, 1 new, 2 items waiting")


@pytest.mark.parametrize("width, height", [(1280, 800), (390, 844)])
def test_each_row_says_what_its_operation_would_do(page, reviewer, propose, width, height):
    """Two transfers from one account read apart without opening them; on a phone the
    whole card opens the operation, not only its first line."""
    page.set_viewport_size({"width": width, "height": height})
    small = propose("call-1", arguments={"from": "operating", "to": "acme", "amount": "1250"})
    propose("call-2", arguments={"from": "operating", "to": "payroll", "amount": "75000"})
    sign_in(page, reviewer)
    page.goto("/approvals/")
    gists = page.locator("table.queue .gist")
    expect(gists).to_have_text(["operating → acme: 1,250.00", "operating → payroll: 75,000.00"])
    row = page.locator(f"#op-{small.pk}")
    if width < 640:  # A tap on the card's last line, where no text is a link.
        box = row.locator("td[data-label=Project]").bounding_box()
        page.mouse.click(box["x"] + box["width"] - 5, box["y"] + box["height"] / 2)
        arrived(page, re.compile(rf"/operations/{small.pk}/$"))
