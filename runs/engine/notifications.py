"""Batched email to reviewers about operations waiting for their decision.

Each reviewer who has not opted out gets at most one email per
``OVERSIGHT_NOTIFY_BATCH_MINUTES`` about the operations that started waiting since
those their previous email listed (never those of runs they own, which they may not
decide).

A worker claims a reviewer's batch before sending it (``notify_claimed_until``, a
conditional update that lasts longer than the mail timeout), so two workers never send
the same email. Only once the mail backend accepted the email does the watermark
(``last_notified_at``) advance, and the claim then stays until the batch window ends.
A failed send releases the claim and advances nothing: the next round sends the same
batch again.

An email lists the oldest ``LISTED`` operations and counts the others, with a link to
the queue; the watermark advances to the ``created_at`` of the last one listed, so the
next email lists the rest. Every waiting operation is thus counted in the first email
after it started waiting, and listed in one (unless it was decided before). Each
operation's action and goal are the agent's words: quoted, apart from Oversight's own
lines and links (``runs.engine.mailtext``).
"""

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db.models import Q, QuerySet

from runs.actions.base import foreseen, plain_reason
from runs.clock import db_now
from runs.engine.deliveries import CLAIM_MARGIN
from runs.engine.mailtext import QUOTED_NOTE, link, quoted
from runs.models import Operation, Preferences
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
    listed, more = _batch(user, preferences.last_notified_at)
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
    window = timedelta(minutes=settings.OVERSIGHT_NOTIFY_BATCH_MINUTES)
    held.update(last_notified_at=listed[-1].created_at, notify_claimed_until=db_now() + window)
    return True


def _batch(user, watermark: datetime | None) -> tuple[list[Operation], int]:
    """The oldest operations waiting since ``watermark`` (up to ``LISTED``, plus any
    sharing the last one's ``created_at``, which the next watermark would skip), and
    how many more wait after them."""
    waiting = pending_for(user).exclude(run__session__owner=user)
    if watermark:
        waiting = waiting.filter(created_at__gt=watermark)
    more = 0
    nth = waiting.order_by("created_at").values_list("created_at", flat=True)[LISTED - 1 : LISTED]
    if nth:
        more = waiting.filter(created_at__gt=nth[0]).count()
        waiting = waiting.filter(created_at__lte=nth[0])
    return list(waiting.select_related("run").order_by("created_at", "pk")), more


def _claim(preferences: Preferences, now: datetime | None) -> QuerySet[Preferences] | None:
    """Claim the reviewer's batch unless another worker holds it or the batch window of
    their previous email is still open; the batch was read at ``last_notified_at``, so
    the claim also requires that no one has sent one since. Returns the held row."""
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
