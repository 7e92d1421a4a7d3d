"""An admin deals with an out-of-band alert: sees who was told, acknowledges it, and
resolves it with a note, which releases the run."""

import re

import pytest
from playwright.sync_api import expect

from runs.engine.worker import Worker
from runs.models import Alert, Operation, Run
from tests.browser.conftest import screenshot, sign_in

pytestmark = pytest.mark.django_db(transaction=True)


def test_admin_acknowledges_and_resolves_an_alert(page, admin_user, approved, run):
    op = approved("http-rigged-no-undo")
    Worker(name="browser").drain()
    op.refresh_from_db()
    assert op.status == Operation.Status.ALERTED
    alert = Alert.objects.get(operation=op)

    sign_in(page, admin_user)
    expect(page.locator("#nav-alerts")).to_have_text("1")
    page.get_by_role("navigation", name="Main").get_by_role(
        "link", name=re.compile("Alerts")
    ).click()
    expect(page).to_have_title("(1) Alerts · Oversight")
    card = page.locator(f"#alert-{alert.pk}")
    expect(card.get_by_role("heading", level=2)).to_have_text(f"Alert {alert.pk} · Open")
    expect(card).to_contain_text(f"What failed: {alert.summary}")
    expect(card.get_by_role("link", name=f"operation {op.pk}")).to_be_visible()
    deliveries = card.locator("ul.deliveries li")
    expect(deliveries).to_have_text(
        [
            re.compile(r"in-app to alerts page: Delivered after 1 attempt"),
            re.compile(r"Email to admin@example\.com: Delivered after 1 attempt", re.IGNORECASE),
        ]
    )

    card.get_by_role("button", name="Acknowledge").click()

    expect(page.locator(".messages")).to_have_text(f"Alert {alert.pk} acknowledged.")
    card = page.locator(f"#alert-{alert.pk}")
    expect(card.get_by_role("heading", level=2)).to_have_text(f"Alert {alert.pk} · Acknowledged")
    expect(card).to_contain_text("acknowledged by admin")
    expect(card.get_by_role("button", name="Acknowledge")).to_have_count(0)
    screenshot(page, "alerts-acknowledged")

    card.get_by_label("Resolution note (required)").fill(
        "Checked the target by hand: item x is green. Nothing to undo."
    )
    card.get_by_role("button", name="Resolve").click()

    expect(page.locator(".messages")).to_have_text(
        f"Alert {alert.pk} resolved; its run is released."
    )
    expect(page.locator(f"#alert-{alert.pk}")).to_have_count(0)
    expect(page.get_by_text("No open alerts.")).to_be_visible()
    expect(page.locator("#nav-alerts")).to_have_text("0")

    alert.refresh_from_db()
    run.refresh_from_db()
    assert alert.status == Alert.Status.RESOLVED
    assert alert.acknowledged_by == admin_user
    assert alert.resolution_note.startswith("Checked the target by hand")
    assert run.reason != Run.Reason.RECONCILIATION
