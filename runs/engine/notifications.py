"""Batched email to reviewers about operations and human requests waiting for them.

Each reviewer who has not opted out gets at most one email per
``OVERSIGHT_NOTIFY_BATCH_MINUTES`` about the operations awaiting a decision and the
requests (questions, sign-offs, choices, data) awaiting an answer that no email to them
has listed yet. Never those they may not decide (``own_interest``: a run they own, an
agent token that acts for them or that they issued): the email would send them to a
page that refuses them.

What an email listed is remembered item by item (``NotifiedOperation``,
``NotifiedRequest``), not as a watermark. A watermark (the ``created_at`` or id of the
last one listed) takes items to become visible in that order, and on PostgreSQL they do
not: a proposal whose transaction began first (earlier ``created_at``, lower id) can
commit after a later one was emailed, and the watermark, already past it, would skip it
forever. A set has no order to get wrong: an item is listed by the first email read
after it committed, whenever that is. PostgreSQL's commit horizon
(``pg_snapshot_xmin``) would order them too, but would hold every email back behind any
long transaction, and has no SQLite counterpart. The sets stay small: only what still
waits is kept, the rest is dropped at the reviewer's next email, and "not listed yet"
is one lookup in a unique index per waiting item.

Nobody is emailed in their quiet hours (``Preferences.quiet_at``, on their own clock),
and nothing is recorded then: what waited is unlisted still, so the first email after
them lists it (or counts it), as after any batch window.

A worker claims a reviewer's batch before sending it (``notify_claimed_until``, a
conditional update that lasts longer than the mail timeout), so two workers never send
the same email; the claim also requires that no email went out since the batch was
read (``last_notified_at``). Only once the mail backend accepted the email is what it
listed recorded, and the claim then stays until the batch window ends. A failed send
releases the claim and records nothing: the next round sends the same batch again.

An email lists the oldest ``LISTED`` operations and the oldest ``LISTED`` requests, and
counts the others of each, with a link to the queue; the next email lists the rest.
Every waiting item is thus counted in the first email after it started waiting, and
listed in one (unless it was decided or answered before). A reviewer's email reads the
same fixed number of queries however much waits. What the agent wrote (an operation's
action and its run's goal, a request's prompt) is quoted, apart from Oversight's own
lines and links (``runs.engine.mailtext``).
"""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet

from runs.actions.base import foreseen, plain_reason
from runs.clock import db_now
from runs.engine.deliveries import CLAIM_MARGIN
from runs.engine.mailtext import QUOTED_NOTE, link, quoted
from runs.models import HumanRequest, Operation, Preferences
from runs.models.preferences import NotifiedOperation, NotifiedRequest
from runs.permissions import excluding_own_interest
from runs.queue import open_requests_for, pending_for

log = logging.getLogger(__name__)
LISTED = 50
# A prompt may run to 4,000 characters: fifty in full would make an email of 200 KB,
# and the request's page, linked beside each, shows all of it.
PROMPT_QUOTED = 1000


@dataclass(frozen=True)
class Batch:
    """What one email lists (the oldest of each kind) and how many more of each wait
    unlisted after them."""

    operations: list[Operation]
    more_operations: int
    requests: list[HumanRequest]
    more_requests: int

    def __bool__(self) -> bool:
        return bool(self.operations or self.requests)

    @property
    def subject(self) -> str:
        counts = [
            (len(self.operations) + self.more_operations, "operation(s)"),
            (len(self.requests) + self.more_requests, "request(s)"),
        ]
        waiting = " and ".join(f"{count} {what}" for count, what in counts if count)
        return f"[Oversight] {waiting} waiting for your decision"


def notify_reviewers(now: datetime | None = None) -> int:
    """Send the due batches; returns how many emails went out. A batch is due by
    ``now``, the database's time at the round's start unless a test moves it forward;
    no one is emailed in their quiet hours at ``now``."""
    reviewers = (
        get_user_model()
        .objects.filter(is_active=True, memberships__role__permissions__codename="decide_operation")
        .exclude(email="")
        .distinct()
    )
    now = now or db_now()  # Read once a round, not once a reviewer.
    return sum(_notify(user, now) for user in reviewers)


def _notify(user, now: datetime) -> bool:
    preferences = Preferences.of(user)
    if not preferences.notify_pending or preferences.quiet_at(now):
        return False
    batch = _batch(user)
    if not batch:
        return False
    held = _claim(preferences, now)
    if held is None:
        return False
    try:
        send_mail(
            subject=batch.subject,
            message=_body(batch),
            from_email=None,
            recipient_list=[user.email],
        )
    except Exception as error:
        again = "the same batch goes out next round"
        if foreseen(error):  # the mail server refused or is away: no bug of ours
            log.warning("notifying %s failed (%s); %s", user, plain_reason(error), again)
        else:
            log.exception("notifying %s failed; %s", user, again)
        held.update(notify_claimed_until=None)
        return False
    _sent(user, held, batch)
    return True


def _batch(user) -> Batch:
    """The oldest operations and requests waiting for ``user`` that no email to them
    listed (up to ``LISTED`` of each), and how many more of each wait after them."""
    operations = _unlisted(
        user,
        pending_for(user),
        NotifiedOperation.objects.filter(user=user, operation=OuterRef("pk")),
    )
    requests = _unlisted(
        user,
        open_requests_for(user),
        NotifiedRequest.objects.filter(user=user, request=OuterRef("pk")),
    )
    return Batch(*_oldest(operations.select_related("run")), *_oldest(requests))


def _unlisted(user, waiting: QuerySet, listed_before: QuerySet) -> QuerySet:
    """``waiting`` but what ``user`` may not decide (``own_interest``) and what
    ``listed_before`` (their emails) listed."""
    return excluding_own_interest(waiting, user).exclude(Exists(listed_before))


def _oldest(unlisted: QuerySet) -> tuple[list, int]:
    """The oldest ``LISTED`` of ``unlisted``, and how many more there are (counted only
    when the list is full: one query fewer for most emails)."""
    listed = list(unlisted.order_by("created_at", "pk")[:LISTED])
    return listed, (unlisted.count() - LISTED if len(listed) == LISTED else 0)


def _sent(user, held: QuerySet[Preferences], batch: Batch) -> None:
    """Record the email: what it listed, so that no later one lists it again; and, in
    the same transaction, forget what no longer waits (it never will again), and hold
    the claim until the batch window ends."""
    window = timedelta(minutes=settings.OVERSIGHT_NOTIFY_BATCH_MINUTES)
    with transaction.atomic():
        NotifiedOperation.objects.bulk_create(
            [NotifiedOperation(user=user, operation=op) for op in batch.operations],
            ignore_conflicts=True,
        )
        NotifiedRequest.objects.bulk_create(
            [NotifiedRequest(user=user, request=asked) for asked in batch.requests],
            ignore_conflicts=True,
        )
        NotifiedOperation.objects.filter(user=user).exclude(
            operation__status=Operation.Status.PROPOSED
        ).delete()
        NotifiedRequest.objects.filter(user=user).exclude(
            request__status=HumanRequest.Status.OPEN
        ).delete()
        sent = db_now()
        held.update(last_notified_at=sent, notify_claimed_until=sent + window)


def _claim(preferences: Preferences, now: datetime | None) -> QuerySet[Preferences] | None:
    """Claim the reviewer's batch unless another worker holds it or the batch window of
    their previous email is still open; the batch was read when their latest email was
    the one at ``last_notified_at``, so the claim also requires that no one has sent one
    since. Returns the held row."""
    start = db_now()
    until = start + timedelta(seconds=settings.OVERSIGHT_EMAIL_TIMEOUT) + CLAIM_MARGIN
    unclaimed = Q(notify_claimed_until__isnull=True) | Q(notify_claimed_until__lte=now or start)
    claimed = Preferences.objects.filter(
        unclaimed, pk=preferences.pk, last_notified_at=preferences.last_notified_at
    ).update(notify_claimed_until=until)
    if not claimed:
        return None
    return Preferences.objects.filter(pk=preferences.pk, notify_claimed_until=until)


def _body(batch: Batch) -> str:
    blocks = [QUOTED_NOTE]
    if batch.operations:
        blocks += ["Operations waiting for your decision:", *map(_operation, batch.operations)]
    if batch.more_operations:
        blocks.append(_more(batch.more_operations, "operations"))
    if batch.requests:
        blocks += ["Requests waiting for your answer:", *map(_request, batch.requests)]
    if batch.more_requests:
        blocks.append(_more(batch.more_requests, "requests"))
    blocks.append(
        f"The queue: {link('approvals')}\n"
        f"Turn these emails off in your preferences: {link('preferences')}"
    )
    return "\n\n".join(blocks) + "\n"


def _more(count: int, what: str) -> str:
    return f"…and {count} more {what}, listed in the next email (all are in the queue)."


def _operation(op: Operation) -> str:
    """One operation: Oversight's facts and link, then the agent's words, quoted."""
    return "\n".join(
        [
            f"Operation {op.pk} ({op.get_risk_display()} risk) in run {op.run_id}: "
            f"{link('operation', op.pk)}",
            quoted("The action, as the agent named it:", op.action),
            quoted("The agent's goal for the run:", op.run.goal, limit=300),
        ]
    )


def _request(asked: HumanRequest) -> str:
    """One request: Oversight's facts and link, then what the agent asks, quoted."""
    return "\n".join(
        [
            f"Request {asked.pk} ({asked.get_kind_display()}) in run {asked.run_id}: "
            f"{link('request', asked.pk)}",
            quoted("What the agent asks:", asked.prompt, limit=PROMPT_QUOTED),
        ]
    )
