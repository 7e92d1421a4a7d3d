"""``OVERSIGHT_ALERT_EMAILS``: "extra recipients of out-of-band alerts"
(docs/operating/settings.md), beside the project's admins (docs/concepts/rollback.md).
Read from the environment as an operator writes it, then an alert raised by a worker
reaches every address, each by an email of its own."""

from django.core import mail

from runs.engine.deliveries import deliver_due
from runs.engine.worker import Worker
from runs.models import Alert
from tests.helpers import project_settings

ONCALL = "oncall@example.com"
SECURITY = "security@example.org"


def test_alert_emails_go_to_every_address_in_OVERSIGHT_ALERT_EMAILS(
    approved, admin_user, monkeypatch, settings
):
    configured = project_settings(monkeypatch, OVERSIGHT_ALERT_EMAILS=f" {ONCALL}, {SECURITY} ,")
    settings.OVERSIGHT_ALERT_EMAILS = configured["OVERSIGHT_ALERT_EMAILS"]
    # A verification that fails with no way to undo: the worker raises an alert.
    operation = approved("http-rigged-no-undo")
    Worker(name="w1").step()
    alert = Alert.objects.get(operation=operation)

    assert deliver_due() == 3

    recipients = sorted([admin_user.email, ONCALL, SECURITY])
    assert sorted(email.to for email in mail.outbox) == [[address] for address in recipients]
    assert {email.subject.split(": ")[0] for email in mail.outbox} == {
        f"[Oversight] Alert {alert.pk}"
    }
    assert all(f"Operation {operation.pk}: " in email.body for email in mail.outbox)


def test_without_OVERSIGHT_ALERT_EMAILS_alerts_go_to_the_admins_alone(
    approved, admin_user, monkeypatch, settings
):
    monkeypatch.delenv("OVERSIGHT_ALERT_EMAILS", raising=False)
    settings.OVERSIGHT_ALERT_EMAILS = project_settings(monkeypatch)["OVERSIGHT_ALERT_EMAILS"]
    approved("http-rigged-no-undo")
    Worker(name="w1").step()

    assert deliver_due() == 1
    assert [email.to for email in mail.outbox] == [[admin_user.email]]
