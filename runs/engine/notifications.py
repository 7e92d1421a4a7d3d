"""Batched email to reviewers about operations waiting for their decision.

Each reviewer who has not opted out gets at most one email per
``OVERSIGHT_NOTIFY_BATCH_MINUTES``, listing the operations that started waiting since
their previous email (never those of runs they own, which they may not decide). A
conditional update of ``last_notified_at`` claims the batch, so two workers never
send the same email twice.
"""

from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.urls import reverse
from django.utils import timezone

from runs.context_processors import pending_for
from runs.models import Operation, Preferences

LISTED = 50


def notify_reviewers(now: datetime | None = None) -> int:
    """Send the due batches; returns how many emails went out."""
    now = now or timezone.now()
    window = timedelta(minutes=settings.OVERSIGHT_NOTIFY_BATCH_MINUTES)
    reviewers = (
        get_user_model()
        .objects.filter(is_active=True, memberships__role__permissions__codename="decide_operation")
        .exclude(email="")
        .distinct()
    )
    return sum(_notify(user, now, window) for user in reviewers)


def _notify(user, now: datetime, window: timedelta) -> bool:
    preferences = Preferences.of(user)
    last = preferences.last_notified_at
    if not preferences.notify_pending or (last and now - last < window):
        return False
    waiting = pending_for(user).exclude(run__session__owner=user)
    if last:
        waiting = waiting.filter(created_at__gt=last)
    operations = list(waiting.select_related("run").order_by("created_at")[:LISTED])
    if not operations:
        return False
    claimed = Preferences.objects.filter(pk=preferences.pk, last_notified_at=last).update(
        last_notified_at=now
    )
    if not claimed:
        return False
    send_mail(
        subject=f"[Oversight] {len(operations)} operation(s) waiting for your decision",
        message=_body(operations),
        from_email=None,
        recipient_list=[user.email],
    )
    return True


def _body(operations: list[Operation]) -> str:
    base = settings.OVERSIGHT_BASE_URL.rstrip("/")
    lines = [
        f"- {op.action} ({op.get_risk_display()} risk) for “{op.run.goal[:80]}”: "
        f"{base}{reverse('operation', args=[op.pk])}"
        for op in operations
    ]
    return (
        "These operations are waiting for your decision:\n\n"
        + "\n".join(lines)
        + f"\n\nThe queue: {base}{reverse('approvals')}\n"
        "Turn these emails off in your preferences: " + f"{base}{reverse('preferences')}\n"
    )
