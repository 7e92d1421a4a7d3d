"""Delivering out-of-band alerts by email and webhook, outside any transaction.

A worker claims a due delivery with a conditional update: attempts + 1, and the next
try pushed past the channel's send timeout plus a margin, so no other worker takes it
while this one may still be sending. The outcome is written only if that attempt is
still the latest (same ``attempts``, still pending): a late result of an attempt whose
claim lapsed and was taken over changes nothing, so a success is never overwritten.
Failed attempts are retried with exponential backoff until
``OVERSIGHT_ALERT_MAX_ATTEMPTS``, then the delivery is marked failed. Claims are set
and compared in the database's time.
"""

import json
import urllib.request
from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import send_mail

from runs.actors import ActorKind
from runs.clock import db_now
from runs.engine.mailtext import QUOTED_NOTE, header_value, link, quoted
from runs.models import Alert, AlertDelivery, Checkpoint, Operation

BATCH = 10
# A claim outlasts the send's timeout by this much: resolving and connecting, writing
# the outcome, and socket timeouts that apply per operation rather than per send.
CLAIM_MARGIN = timedelta(seconds=30)


def deliver_due(now: datetime | None = None) -> int:
    """Attempt every due delivery once; returns how many were attempted. Due means by
    ``now``, the database's time unless a test moves it forward."""
    due = AlertDelivery.objects.filter(
        status=AlertDelivery.Status.PENDING, next_attempt_at__lte=now or db_now()
    ).order_by("next_attempt_at")
    attempted = 0
    for delivery in due.select_related("alert__run", "alert__operation")[:BATCH]:
        if _claim(delivery):
            _attempt(delivery)
            attempted += 1
    return attempted


def _claim(delivery: AlertDelivery) -> bool:
    # Read the clock per claim: sending the earlier ones of a batch may take minutes.
    timeout = timedelta(seconds=getattr(settings, TIMEOUTS[delivery.channel]))
    claimed = AlertDelivery.objects.filter(
        pk=delivery.pk, status=AlertDelivery.Status.PENDING, attempts=delivery.attempts
    ).update(attempts=delivery.attempts + 1, next_attempt_at=db_now() + timeout + CLAIM_MARGIN)
    delivery.attempts += 1
    return claimed == 1


def _attempt(delivery: AlertDelivery) -> None:
    this_attempt = AlertDelivery.objects.filter(
        pk=delivery.pk, status=AlertDelivery.Status.PENDING, attempts=delivery.attempts
    )
    try:
        SENDERS[delivery.channel](delivery)
    except Exception as exc:
        gave_up = delivery.attempts >= settings.OVERSIGHT_ALERT_MAX_ATTEMPTS
        backoff = timedelta(seconds=min(3600, 5 * 2 ** (delivery.attempts - 1)))
        this_attempt.update(
            last_error=f"attempt {delivery.attempts}: {exc}"[:2000],
            status=AlertDelivery.Status.FAILED if gave_up else AlertDelivery.Status.PENDING,
            next_attempt_at=None if gave_up else db_now() + backoff,
        )
        return
    this_attempt.update(status=AlertDelivery.Status.DELIVERED, delivered_at=db_now(), last_error="")


def alert_text(delivery: AlertDelivery) -> str:
    """The alert email's body: Oversight's words and links, with everything the agent
    (or a target) wrote quoted (``runs.engine.mailtext``)."""
    alert = delivery.alert
    state_left = json.dumps(alert.state_left, indent=2, sort_keys=True)
    blocks = [
        f"Oversight alert {alert.pk}: run {alert.run_id} is halted until an admin resolves "
        "this alert.",
        QUOTED_NOTE,
        quoted(_summary_label(alert), alert.summary),
        quoted(f"The agent's goal for run {alert.run_id}:", alert.run.goal),
        quoted("State left behind, as recorded (it holds the agent's arguments):", state_left),
        _links(alert),
    ]
    return "\n\n".join(blocks) + "\n"


def _summary_label(alert: Alert) -> str:
    """Whose words the summary is: the agent's when it asked for the alert itself."""
    raised_by = alert.operation_id and (
        Checkpoint.objects.filter(
            operation_id=alert.operation_id, to_status=Operation.Status.ALERTED
        )
        .values_list("actor_kind", flat=True)
        .first()
    )
    if raised_by == ActorKind.AGENT:
        return "What failed, in the agent's words:"
    return "What failed, as recorded (it may quote the target's answer):"


def _links(alert: Alert) -> str:
    lines = [
        f"Run {alert.run_id}: {link('run', alert.run_id)}",
        f"Acknowledge and resolve it: {link('alerts')}",
    ]
    if alert.operation_id:
        lines.insert(0, f"Operation {alert.operation_id}: {link('operation', alert.operation_id)}")
    return "\n".join(lines)


def _send_email(delivery: AlertDelivery) -> None:
    send_mail(
        subject=f"[Oversight] Alert {delivery.alert_id}: {header_value(delivery.alert.summary)}",
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
# The setting that bounds each channel's send: the SMTP backend's and urlopen's timeout.
TIMEOUTS = {
    AlertDelivery.Channel.EMAIL: "OVERSIGHT_EMAIL_TIMEOUT",
    AlertDelivery.Channel.WEBHOOK: "OVERSIGHT_HTTP_TIMEOUT",
}
