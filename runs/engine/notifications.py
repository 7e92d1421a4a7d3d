"""Batched email to reviewers about operations waiting for their decision.

Each reviewer who has not opted out gets at most one email per
``OVERSIGHT_NOTIFY_BATCH_MINUTES`` about the waiting operations no email to them has
listed yet (never those of runs they own, which they may not decide).

What an email listed is remembered operation by operation (``NotifiedOperation``), not
as a watermark. A watermark (the ``created_at`` or id of the last one listed) takes
operations to become visible in that order, and on PostgreSQL they do not: a proposal
whose transaction began first (earlier ``created_at``, lower id) can commit after a
later one was emailed, and the watermark, already past it, would skip it forever. A
set has no order to get wrong: an operation is listed by the first email read after it
committed, whenever that is. PostgreSQL's commit horizon (``pg_snapshot_xmin``) would
order them too, but would hold every email back behind any long transaction, and has no
SQLite counterpart. The set stays small: only operations still waiting are kept, the
others are dropped at the reviewer's next email, and "not listed yet" is one lookup in
its unique index per waiting operation.

A worker claims a reviewer's batch before sending it (``notify_claimed_until``, a
conditional update that lasts longer than the mail timeout), so two workers never send
the same email; the claim also requires that no email went out since the batch was
read (``last_notified_at``). Only once the mail backend accepted the email is what it
listed recorded, and the claim then stays until the batch window ends. A failed send
releases the claim and records nothing: the next round sends the same batch again.

An email lists the oldest ``LISTED`` operations and counts the others, with a link to
the queue; the next email lists the rest. Every waiting operation is thus counted in
the first email after it started waiting, and listed in one (unless it was decided
before). Each operation's action and goal are the agent's words: quoted, apart from
Oversight's own lines and links (``runs.engine.mailtext``).
"""

import logging
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
from runs.models import Operation, Preferences
from runs.models.preferences import NotifiedOperation
from runs.queue import pending_for

log = logging.getLogger(__name__)
LISTED = 50


def notify_reviewers(now: datetime | None = None) -> int:
    """Send the due batches; returns how many emails went out. A batch is due by
    ``now``, the database's time unless a test moves it forward."""
    reviewers = (
        get_user_model()
        .objects.filter(is_active=True, memberships__role__permissions__codename="decide_operation")
        .exclude(email="")
        .distinct()
    )
    return sum(_notify(user, now) for user in reviewers)


def _notify(user, now: datetime | None) -> bool:
    preferences = Preferences.of(user)
    if not preferences.notify_pending:
        return False
    listed, more = _batch(user)
    if not listed:
        return False
    held = _claim(preferences, now)
    if held is None:
        return False
    try:
        send_mail(
            subject=f"[Oversight] {len(listed) + more} operation(s) waiting for your decision",
            message=_body(listed, more),
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
    _sent(user, held, listed)
    return True


def _batch(user) -> tuple[list[Operation], int]:
    """The oldest operations waiting for ``user`` that no email to them listed (up to
    ``LISTED``), and how many more of those wait after them."""
    listed_before = NotifiedOperation.objects.filter(user=user, operation=OuterRef("pk"))
    unlisted = pending_for(user).exclude(run__session__owner=user).exclude(Exists(listed_before))
    listed = list(unlisted.select_related("run").order_by("created_at", "pk")[:LISTED])
    more = unlisted.count() - LISTED if len(listed) == LISTED else 0
    return listed, more


def _sent(user, held: QuerySet[Preferences], listed: list[Operation]) -> None:
    """Record the email: what it listed, so that no later one lists it again; and, in
    the same transaction, forget what no longer waits (it never will again), and hold
    the claim until the batch window ends."""
    window = timedelta(minutes=settings.OVERSIGHT_NOTIFY_BATCH_MINUTES)
    with transaction.atomic():
        NotifiedOperation.objects.bulk_create(
            [NotifiedOperation(user=user, operation=op) for op in listed], ignore_conflicts=True
        )
        NotifiedOperation.objects.filter(user=user).exclude(
            operation__status=Operation.Status.PROPOSED
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


def _body(operations: list[Operation], more: int) -> str:
    blocks = [
        "These operations are waiting for your decision.",
        QUOTED_NOTE,
        *(_listed(op) for op in operations),
    ]
    if more:
        blocks.append(f"…and {more} more, listed in the next email (all are in the queue).")
    blocks.append(
        f"The queue: {link('approvals')}\n"
        f"Turn these emails off in your preferences: {link('preferences')}"
    )
    return "\n\n".join(blocks) + "\n"


def _listed(op: Operation) -> str:
    """One operation: Oversight's facts and link, then the agent's words, quoted."""
    return "\n".join(
        [
            f"Operation {op.pk} ({op.get_risk_display()} risk) in run {op.run_id}: "
            f"{link('operation', op.pk)}",
            quoted("The action, as the agent named it:", op.action),
            quoted("The agent's goal for the run:", op.run.goal, limit=300),
        ]
    )
