"""A reviewer's decisions in the browser on an agent's ``invoices.pay`` proposal
(irreversible: each approval types the action's name), and the auditor's view of them:
the steps every adapter's browser test takes."""

import json
import re

from playwright.sync_api import Locator, Page, expect

CONFIRM = "This cannot be undone. Type invoices.pay to confirm"  # rollback_kind="none"


def approve(page: Page) -> None:
    form = page.locator("form.decision-approve")
    form.get_by_label(CONFIRM).fill("invoices.pay")
    form.get_by_role("button", name="Approve").click()
    # With more waiting, the next operation opens, the message naming this one first.
    expect(page.locator(".messages")).to_contain_text("Approved; the agent carries it out now.")


def reject(page: Page, reason: str) -> None:
    page.locator("details.more summary").get_by_text("Reject", exact=True).click()
    form = page.locator("form.decision-reject")
    form.get_by_label("Reason (required)").fill(reason)
    form.get_by_role("button", name="Reject").click()
    expect(page.locator(".messages")).to_contain_text("Rejected; the agent reads your reason.")


def edit(page: Page, arguments: dict, comment: str, shown: dict | None = None) -> None:
    """Edit the arguments (the editor first shows ``shown``, if given), preview the edit
    and approve it."""
    page.locator("details.more summary", has_text="Edit and approve").click()
    editor = page.locator("form.editor").get_by_label("Arguments (JSON)")
    if shown is not None:
        assert json.loads(editor.input_value()) == shown
    editor.fill(json.dumps(arguments, indent=2))
    page.get_by_role("button", name="Preview the edit").click()
    form = page.locator("form.decision-edit")
    form.get_by_label("Comment (optional)").fill(comment)
    form.get_by_label(CONFIRM).fill("invoices.pay")
    form.get_by_role("button", name="Approve the edited arguments").click()
    expect(page.locator(".messages")).to_contain_text("Approved; the agent carries it out now.")


def decided_by_reviewer(page: Page, events: str = r"operation\.status") -> Locator:
    """The rows of the run's history (its audit page, open) where user ``reviewer``
    moved an operation (or what ``events`` matches)."""
    return (
        page.locator("table.audit tbody tr")
        .filter(has_text=re.compile(events))
        .filter(has_text="user reviewer")
    )
