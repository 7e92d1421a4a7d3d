"""Delivering out-of-band alerts by email and webhook, outside any transaction.

A worker claims a due delivery with a conditional update: attempts + 1, and the next
try pushed past the channel's send timeout plus a margin, so no other worker takes it
while this one may still be sending. The outcome is written only if the delivery is
still as that claim left it (same ``attempts`` and ``next_attempt_at``, still pending):
a late result of an attempt whose claim lapsed and was taken over, or that an admin's
"send again" overtook, changes nothing, so a success is never overwritten.

Deliveries are at least once, not exactly once: a worker paused past its claim, or a
"send again" while it sends, lets another worker send the same alert again. So every
email carries a ``Message-ID``, and every webhook call an ``Oversight-Delivery`` header,
that are the same on each attempt of one delivery and differ between deliveries:
receivers deduplicate on them.

A failed attempt is logged (a warning naming the delivery, its channel, the attempt and
why, in words that hold no address or secret) and retried further and further apart,
until ``OVERSIGHT_ALERT_RETRY_HOURS`` after ``retrying_since`` (or after
``OVERSIGHT_ALERT_MAX_ATTEMPTS``, if set); then it is marked failed, and the alerts page
offers to send it again. Claims and retries are set and compared in the database's time.
"""

import json
import logging
import urllib.error
import urllib.request
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.core.mail import EmailMessage
from django.db.models import QuerySet

from runs.actions.base import foreseen, plain_reason
from runs.actors import ActorKind
from runs.clock import db_now
from runs.engine.mailtext import QUOTED_NOTE, header_value, link, quoted
from runs.logs import about
from runs.models import Alert, AlertDelivery, Checkpoint, Operation

log = logging.getLogger(__name__)

BATCH = 10
# A claim outlasts the send's timeout by this much: resolving and connecting, writing
# the outcome, and socket timeouts that apply per operation rather than per send.
CLAIM_MARGIN = timedelta(seconds=30)
# After a failed attempt the next waits as long as the delivery has been retrying, within
# these bounds: 5 s, 5 s, 10 s, 20 s… then hourly, so a channel that is back is used
# within the hour, and a day of retries is some 35 attempts.
SHORTEST_WAIT = timedelta(seconds=5)
LONGEST_WAIT = timedelta(hours=1)


class Refused(Exception):
    """The receiver answered, and not with a success: its status code says why."""


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


def _as_read(delivery: AlertDelivery) -> QuerySet[AlertDelivery]:
    """The delivery, as long as it is as ``delivery`` last saw it: no claim by another
    worker and no "send again" since (each changes ``attempts`` or ``next_attempt_at``)."""
    return AlertDelivery.objects.filter(
        pk=delivery.pk,
        status=AlertDelivery.Status.PENDING,
        attempts=delivery.attempts,
        next_attempt_at=delivery.next_attempt_at,
    )


def _claim(delivery: AlertDelivery) -> bool:
    # Read the clock per claim: sending the earlier ones of a batch may take minutes.
    timeout = timedelta(seconds=getattr(settings, TIMEOUTS[delivery.channel]))
    until = db_now() + timeout + CLAIM_MARGIN
    claimed = _as_read(delivery).update(attempts=delivery.attempts + 1, next_attempt_at=until)
    delivery.attempts, delivery.next_attempt_at = delivery.attempts + 1, until
    return claimed == 1


def _attempt(delivery: AlertDelivery) -> None:
    alert = delivery.alert
    # Log lines name the alert's run and operation, and never show the target (a
    # webhook's URL may hold its secret), not even in a traceback.
    with about(run_id=alert.run_id, operation_id=alert.operation_id, arguments=delivery.target):
        try:
            SENDERS[delivery.channel](delivery)
        except Exception as error:
            _failed(delivery, error)
            return
    _as_read(delivery).update(
        status=AlertDelivery.Status.DELIVERED, delivered_at=db_now(), last_error=""
    )


def failure_reason(cause: Exception) -> str:
    """Why an attempt to send failed, in words: a refusal's own, or the error's plain
    reason."""
    return str(cause) if isinstance(cause, Refused) else plain_reason(cause)


def log_failed_attempt(
    logger: logging.Logger,
    what: str,
    attempt: int,
    reason: str,
    wait: timedelta | None,
    cause: Exception,
    error: Exception | None = None,
) -> None:
    """One warning for a failed attempt to send ``what`` (an alert's, a webhook's or a
    Slack message's): why, and when the next try is (``wait``; None: given up). A
    traceback (of ``error``, by default ``cause``) only for what no receiver is known to
    cause: a bug of ours."""
    next_try = "given up" if wait is None else f"next try in {round(wait.total_seconds())} s"
    logger.warning(
        "%s, attempt %d failed: %s; %s",
        what,
        attempt,
        reason,
        next_try,
        exc_info=None if isinstance(cause, Refused) or foreseen(cause) else (error or cause),
    )


def _failed(delivery: AlertDelivery, error: Exception) -> None:
    """Record the failure and when to try again, or give up; log it either way."""
    cause, now = _cause(error), db_now()
    reason = failure_reason(cause)
    deadline = delivery.retrying_since + settings.OVERSIGHT_ALERT_RETRY
    limit = settings.OVERSIGHT_ALERT_MAX_ATTEMPTS
    gave_up = now >= deadline or (limit is not None and delivery.attempts >= limit)
    wait = min(max(now - delivery.retrying_since, SHORTEST_WAIT), LONGEST_WAIT, deadline - now)
    what = f"alert {delivery.alert_id}: {delivery.channel} delivery {delivery.pk}"
    log_failed_attempt(
        log, what, delivery.attempts, reason, None if gave_up else wait, cause, error
    )
    _as_read(delivery).update(
        last_error=f"attempt {delivery.attempts}: {reason}",
        status=AlertDelivery.Status.FAILED if gave_up else AlertDelivery.Status.PENDING,
        next_attempt_at=None if gave_up else now + wait,
    )


def _cause(error: Exception) -> BaseException:
    """What broke: urllib wraps a refused or broken connection in a ``URLError``."""
    if isinstance(error, urllib.error.URLError) and isinstance(error.reason, BaseException):
        return error.reason
    return error


def delivery_id(delivery: AlertDelivery) -> str:
    """The delivery's own id, the same on every attempt and unique to it: an RFC 5322
    msg-id (without its angle brackets) under the site's domain, that of
    ``OVERSIGHT_BASE_URL`` (an IPv6 address as a domain literal)."""
    host = urlsplit(settings.OVERSIGHT_BASE_URL).hostname or "localhost"
    domain = f"[{host}]" if ":" in host else host
    return f"alert-{delivery.alert_id}.delivery-{delivery.pk}@{domain}"


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
    EmailMessage(
        subject=f"[Oversight] Alert {delivery.alert_id}: {header_value(delivery.alert.summary)}",
        body=alert_text(delivery),
        to=[delivery.target],
        headers={"Message-ID": f"<{delivery_id(delivery)}>"},
    ).send()


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
        headers={
            "Content-Type": "application/json",
            "Idempotency-Key": f"alert-{alert.pk}",
            "Oversight-Delivery": delivery_id(delivery),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=settings.OVERSIGHT_HTTP_TIMEOUT) as response:
            status = response.status
    except urllib.error.HTTPError as error:
        with error:  # Its body is not read: let its connection go.
            status = error.code
    if not 200 <= status < 300:
        raise Refused(f"the webhook answered {status}")


SENDERS = {AlertDelivery.Channel.EMAIL: _send_email, AlertDelivery.Channel.WEBHOOK: _send_webhook}
# The setting that bounds each channel's send: the SMTP backend's and urlopen's timeout.
TIMEOUTS = {
    AlertDelivery.Channel.EMAIL: "OVERSIGHT_EMAIL_TIMEOUT",
    AlertDelivery.Channel.WEBHOOK: "OVERSIGHT_HTTP_TIMEOUT",
}
