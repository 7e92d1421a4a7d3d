"""An admin stops a run that still has an operation waiting for a decision."""

import re

import pytest
from playwright.sync_api import expect

from runs.models import Operation, Run
from tests.browser.conftest import arrived, screenshot, sign_in

pytestmark = pytest.mark.django_db(transaction=True)


def test_admin_cancels_a_run_with_a_reason(page, admin_user, run, propose):
    op = propose()
    sign_in(page, admin_user)
    page.goto(f"/runs/{run.pk}/")
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Run {run.pk}: Waiting")
    row = page.get_by_role("row").filter(has_text=f"Operation {op.pk}")
    expect(row.locator(".status")).to_have_text("Proposed")
    expect(page.locator(".notice")).to_contain_text("Waiting for")

    page.get_by_role("link", name="Cancel run…").click()
    arrived(page, re.compile(rf"/runs/{run.pk}/cancel/$"))
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Cancel run {run.pk}?")
    reason = page.get_by_label("Reason (required)")
    cancel = page.get_by_role("button", name="Cancel the run")

    # Empty: the browser's own required-field check stops the form; nothing is sent.
    cancel.click()
    arrived(page, re.compile(rf"/runs/{run.pk}/cancel/$"))
    assert reason.evaluate("el => el.validity.valueMissing")
    assert reason.evaluate("el => el.validationMessage")
    expect(reason).to_be_focused()
    run.refresh_from_db()
    assert run.status != Run.Status.CANCELLED

    # Only spaces pass the browser's check; the server strips them and refuses.
    reason.fill("   ")
    cancel.click()
    expect(page.get_by_role("alert")).to_have_text("This field is required.")
    run.refresh_from_db()
    assert run.status != Run.Status.CANCELLED

    page.get_by_label("Reason (required)").fill("The supplier invoice was paid by hand.")
    page.get_by_role("button", name="Cancel the run").click()

    arrived(page, re.compile(rf"/runs/{run.pk}/$"))
    expect(page.locator(".messages")).to_have_text("The run is cancelled; nothing more will fire.")
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Run {run.pk}: Cancelled")
    row = page.get_by_role("row").filter(has_text=f"Operation {op.pk}")
    expect(row.locator(".status")).to_have_text("Cancelled")
    expect(page.get_by_role("link", name="Cancel run…")).to_have_count(0)
    expect(page.locator("ol.timeline")).to_contain_text("The supplier invoice was paid by hand.")
    screenshot(page, "run-cancelled")

    run.refresh_from_db()
    op.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert op.status == Operation.Status.CANCELLED
