"""Sending projects' webhooks (``runs.models.webhooks``), in the notification lane
(``notifying``), outside any transaction.

A round takes the due deliveries, at most one per endpoint and ``BATCH`` in all, so a
receiver with a backlog, or one that never answers, takes one place in a round and
leaves the others to other endpoints. It claims them as alert deliveries are claimed
(``runs.engine.deliveries``: a conditional update, the claim outlasting the send, and
an outcome written only while the delivery is as its claim left it), then sends them
all at once, each in a thread of its own, and records each outcome as soon as it
comes: a receiver that hangs holds its own thread until the deadline, never another
endpoint's delivery. The threads only send; the database is read and written by the
lane's thread alone.

Each request goes through ``http.request``'s guarded client, so that a webhook cannot
reach what an agent's call may not: the host resolved once and its addresses checked
(an internal one only where its ``host:port`` is in ``OVERSIGHT_HTTP_ALLOWED_HOSTS``),
redirects never followed, one deadline over the whole exchange
(``OVERSIGHT_HTTP_DEADLINE``), and the answer read to a cap
(``OVERSIGHT_HTTP_MAX_RESPONSE_BYTES``).

A delivery goes out at least once, not exactly once (see ``deliveries``): its
``Oversight-Delivery`` id is the same on every attempt, and receivers deduplicate on it.
Its body is the same on every attempt; it is signed anew at each, with the time:
``Oversight-Signature: sha256=<hex>`` is the HMAC-SHA256 of ``<timestamp>.<body>``
under the endpoint's secret, ``Oversight-Timestamp`` that time in Unix seconds, which
a receiver compares with its clock to refuse a replay (docs/operating/webhooks.md).

A failed attempt (no answer within the deadline, or an answer that is not 2xx: a
redirect is not followed) is logged and tried again 1 minute later, then 5, 25 and 125
minutes, then every 8 hours: the eighth attempt, about a day after the first, is the
last, and the delivery is failed. What the log and ``last_error`` say never shows the
endpoint's URL, which may hold a secret of its own.
"""

import hashlib
import hmac
import json
import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import OuterRef, QuerySet, Subquery
from django.db.models.functions import Now

from oversight.version import VERSION
from runs.actions import http
from runs.clock import db_now
from runs.engine.deliveries import (
    CLAIM_MARGIN,
    Refused,
    failure_reason,
    log_failed_attempt,
)
from runs.logs import about, cut, strings
from runs.models import WebhookDelivery, WebhookEndpoint

log = logging.getLogger(__name__)
BATCH = 10
MAX_ATTEMPTS = 8
# The wait after a failed attempt: this, times GROWTH after each failure, up to LONGEST.
FIRST_WAIT = timedelta(minutes=1)
GROWTH = 5
LONGEST_WAIT = timedelta(hours=8)
PENDING, DELIVERED = WebhookDelivery.Status.PENDING, WebhookDelivery.Status.DELIVERED
FAILED = WebhookDelivery.Status.FAILED


def deliver_webhooks(now: datetime | None = None) -> int:
    """Attempt the due deliveries once (see above); returns how many were attempted.
    Due means by ``now``, the database's time unless a test moves it forward."""
    due = _due(now or db_now())
    if not due:
        return 0
    until = db_now() + timedelta(seconds=settings.OVERSIGHT_HTTP_DEADLINE) + CLAIM_MARGIN
    claimed = [delivery for delivery in due if _claim(delivery, until)]
    if not claimed:
        return 0
    with ThreadPoolExecutor(len(claimed), thread_name_prefix="webhook") as pool:
        sending = {
            pool.submit(_post, delivery.endpoint.url, *_signed(delivery)): delivery
            for delivery in claimed
        }
        for sent in as_completed(sending):
            _outcome(sending[sent], sent)
    return len(claimed)


def retry_wait(attempts: int) -> timedelta:
    """How long to wait after the ``attempts``-th failed attempt."""
    return min(FIRST_WAIT * GROWTH ** (attempts - 1), LONGEST_WAIT)


def _due(now: datetime) -> list[WebhookDelivery]:
    """The first due delivery of each active endpoint (the one due longest), for the
    ``BATCH`` endpoints whose first has been due longest. Read from the endpoints (a
    table of settings, a few rows), each one's first found by index: grouping the due
    deliveries by endpoint instead reads them all, however many a dead receiver has."""
    due = WebhookDelivery.objects.filter(
        endpoint=OuterRef("pk"), status=PENDING, next_attempt_at__lte=now
    ).order_by("next_attempt_at", "pk")
    firsts = (
        WebhookEndpoint.objects.filter(active=True)
        .annotate(
            since=Subquery(due.values("next_attempt_at")[:1]),
            first=Subquery(due.values("pk")[:1]),
        )
        .filter(since__isnull=False)
        .order_by("since")
        .values_list("first", flat=True)[:BATCH]
    )
    if not (keys := list(firsts)):
        return []
    found = WebhookDelivery.objects.filter(pk__in=keys).order_by("next_attempt_at", "pk")
    return list(found.select_related("endpoint", "event__project"))


def _as_read(delivery: WebhookDelivery) -> QuerySet[WebhookDelivery]:
    """The delivery, as long as it is as ``delivery`` last saw it: still pending, and no
    claim since (each claim counts an attempt, so ``attempts`` is its version). Its
    ``next_attempt_at`` is not compared: on SQLite the first one, the database's default,
    is stored in another text form than the same instant sent by Django."""
    return WebhookDelivery.objects.filter(
        pk=delivery.pk, status=PENDING, attempts=delivery.attempts
    )


def _claim(delivery: WebhookDelivery, until: datetime) -> bool:
    claimed = _as_read(delivery).update(attempts=delivery.attempts + 1, next_attempt_at=until)
    delivery.attempts, delivery.next_attempt_at = delivery.attempts + 1, until
    return claimed == 1


def _signed(delivery: WebhookDelivery) -> tuple[bytes, dict[str, str]]:
    """The delivery's body, and its headers signed now with the endpoint's secret."""
    event = delivery.event
    body = json.dumps(
        {
            "id": str(delivery.delivery_id),
            "event": event.kind,
            "created_at": event.created_at.isoformat(),
            "project": event.project.slug,
            "data": event.data,
        }
    ).encode()
    timestamp = str(int(time.time()))
    signature = hmac.new(
        delivery.endpoint.secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256
    )
    return body, {
        "Content-Type": "application/json",
        "User-Agent": f"Oversight/{VERSION}",
        "Oversight-Delivery": str(delivery.delivery_id),
        "Oversight-Event": event.kind,
        "Oversight-Timestamp": timestamp,
        "Oversight-Signature": f"sha256={signature.hexdigest()}",
    }


def _post(url: str, body: bytes, headers: dict[str, str]) -> http.Answer:
    """In a thread of the round: no database here."""
    return http.exchange("POST", url, body, headers)


def _outcome(delivery: WebhookDelivery, sent: Future) -> None:
    try:
        answer = sent.result()
    except Exception as error:
        _failed(delivery, error)
        return
    if not 200 <= answer.status < 300:
        _failed(delivery, Refused(f"the receiver answered {answer}"), answer.status)
        return
    _as_read(delivery).update(
        status=DELIVERED,
        delivered_at=Now(),
        next_attempt_at=None,
        last_status=answer.status,
        last_error="",
    )


def _failed(delivery: WebhookDelivery, error: Exception, status: int | None = None) -> None:
    """Record the failure and when to try again, or give up; log it either way, in
    words that never show the endpoint's URL."""
    url = delivery.endpoint.url
    said = failure_reason(error)
    reason = cut(said.replace(url, "the endpoint"), strings(url))
    gave_up = delivery.attempts >= MAX_ATTEMPTS
    wait = retry_wait(delivery.attempts)
    data = delivery.event.data
    operation = data["id"] if data["item"] == "operation" else data.get("operation")
    with about(run_id=data["run"], operation_id=operation, arguments=url):
        what = f"webhook {delivery.endpoint}: {delivery.event.kind} delivery {delivery.delivery_id}"
        log_failed_attempt(log, what, delivery.attempts, reason, None if gave_up else wait, error)
    _as_read(delivery).update(
        status=FAILED if gave_up else PENDING,
        next_attempt_at=None if gave_up else db_now() + wait,
        last_status=status,
        last_error=f"attempt {delivery.attempts}: {reason}",
    )
