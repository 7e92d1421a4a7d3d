"""An auditor answers a question in the browser: finds a reviewer's approval, opens
the checkpoint, sees what changed, and verifies the run's chain in place."""

import re

import pytest
from playwright.sync_api import expect

from runs.models import Checkpoint
from tests.browser.conftest import arrived, screenshot, sign_in
from tests.helpers import decide_on

pytestmark = pytest.mark.django_db(transaction=True)


def test_auditor_finds_an_approval_and_verifies_the_chain(page, auditor, reviewer, run, propose):
    operation = propose()
    decide_on(operation, reviewer, "approve", comment="checked with finance")
    sign_in(page, auditor)

    page.get_by_role("link", name="Audit", exact=True).click()
    page.get_by_label("Actor name").fill(reviewer.get_username())
    page.get_by_label("Decision").select_option("approve")
    page.get_by_role("button", name="Search").click()

    arrived(page, re.compile(r"actor=reviewer.*decision=approve"))
    rows = page.locator("table.audit tbody tr")
    expect(rows).to_have_count(1)
    expect(rows).to_contain_text("checked with finance")
    screenshot(page, "audit-search")

    approval = Checkpoint.objects.get(operation=operation, to_status="approved")
    rows.get_by_role("link", name=f"Run {run.pk} #{approval.seq}").click()
    expect(page.get_by_role("heading", level=1)).to_have_text(
        f"Checkpoint {approval.seq} of run {run.pk}"
    )
    expect(page.locator(".facts").first).to_contain_text("approve by reviewer")
    changed = page.locator("table.diff-table tr").filter(has_text="pending_operations[0].status")
    expect(changed).to_contain_text('"proposed"')
    expect(changed).to_contain_text('"approved"')
    screenshot(page, "audit-checkpoint")

    page.get_by_role("link", name=f"Run {run.pk}", exact=True).click()
    page.get_by_role("button", name="Verify chain").click()
    expect(page.locator("#chain-result")).to_contain_text(
        "The chain holds. Every checkpoint's hash was recomputed"
    )
    run.refresh_from_db()
    expect(page.locator("#chain-result")).to_contain_text(f"up to version {run.version}.")
    # htmx swapped the result in: the page did not navigate.
    arrived(page, re.compile(rf"/audit/runs/{run.pk}/$"))
    screenshot(page, "audit-run-verified")
