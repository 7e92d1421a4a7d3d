"""Delivering out-of-band alerts by email and webhook, outside any transaction.

A worker claims a due delivery with a conditional update (attempts + 1, next try
pushed back), so two workers never send the same attempt; the outcome of each attempt
is stored. Failed attempts are retried with exponential backoff until
``OVERSIGHT_ALERT_MAX_ATTEMPTS``, then the delivery is marked failed.
"""

import json
import urllib.request
from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import send_mail
from django.utils import timezone

from runs.models import AlertDelivery

BATCH = 10


def deliver_due(now: datetime | None = None) -> int:
    """Attempt every due delivery once; returns how many were attempted."""
    now = now or timezone.now()
    due = AlertDelivery.objects.filter(
        status=AlertDelivery.Status.PENDING, next_attempt_at__lte=now
    ).order_by("next_attempt_at")
    attempted = 0
    for delivery in due.select_related("alert__run", "alert__operation")[:BATCH]:
        if _claim(delivery, now):
            _attempt(delivery, now)
            attempted += 1
    return attempted


def _claim(delivery: AlertDelivery, now: datetime) -> bool:
    backoff = timedelta(seconds=min(3600, 5 * 2**delivery.attempts))
    claimed = AlertDelivery.objects.filter(
        pk=delivery.pk, status=AlertDelivery.Status.PENDING, attempts=delivery.attempts
    ).update(attempts=delivery.attempts + 1, next_attempt_at=now + backoff)
    delivery.attempts += 1
    return claimed == 1


def _attempt(delivery: AlertDelivery, now: datetime) -> None:
    try:
        SENDERS[delivery.channel](delivery)
    except Exception as exc:
        gave_up = delivery.attempts >= settings.OVERSIGHT_ALERT_MAX_ATTEMPTS
        AlertDelivery.objects.filter(pk=delivery.pk).update(
            last_error=f"attempt {delivery.attempts}: {exc}"[:2000],
            status=AlertDelivery.Status.FAILED if gave_up else AlertDelivery.Status.PENDING,
        )
        return
    AlertDelivery.objects.filter(pk=delivery.pk).update(
        status=AlertDelivery.Status.DELIVERED, delivered_at=now, last_error=""
    )


def alert_text(delivery: AlertDelivery) -> str:
    alert = delivery.alert
    return (
        f"Oversight alert {alert.pk}: {alert.summary}\n\n"
        f"Run {alert.run_id}: {alert.run.goal}\n"
        f"Operation: {alert.operation_id}\n"
        f"State left: {json.dumps(alert.state_left, indent=2, sort_keys=True)}\n\n"
        "The run is halted until an admin resolves this alert."
    )


def _send_email(delivery: AlertDelivery) -> None:
    send_mail(
        subject=f"[Oversight] Alert {delivery.alert_id}: {delivery.alert.summary[:120]}",
        message=alert_text(delivery),
        from_email=None,
        recipient_list=[delivery.target],
    )


def _send_webhook(delivery: AlertDelivery) -> None:
    alert = delivery.alert
    body = json.dumps(
        {
            "alert": alert.pk,
            "project": alert.project_id,
            "run": alert.run_id,
            "operation": alert.operation_id,
            "summary": alert.summary,
            "state_left": alert.state_left,
        }
    ).encode()
    request = urllib.request.Request(
        delivery.target,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": f"alert-{alert.pk}"},
    )
    with urllib.request.urlopen(request, timeout=settings.OVERSIGHT_HTTP_TIMEOUT) as response:
        if not 200 <= response.status < 300:
            raise RuntimeError(f"webhook answered {response.status}")


SENDERS = {AlertDelivery.Channel.EMAIL: _send_email, AlertDelivery.Channel.WEBHOOK: _send_webhook}
