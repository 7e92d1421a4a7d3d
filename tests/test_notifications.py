"""Batched emails to reviewers about operations waiting for their decision."""

from datetime import timedelta

from django.core import mail
from django.utils import timezone

from runs.engine.notifications import notify_reviewers
from runs.models import Preferences


def inbox(user) -> list:
    return [message for message in mail.outbox if message.to == [user.email]]


def test_reviewers_get_one_email_listing_what_waits(propose, reviewer, reviewer2, owner):
    first, second = propose("call-1"), propose("call-2")

    assert notify_reviewers() == 2  # reviewer and reviewer2; the owner owns the run
    (email,) = inbox(reviewer)
    assert "2 operation(s) waiting" in email.subject
    assert f"/operations/{first.pk}/" in email.body
    assert f"/operations/{second.pk}/" in email.body
    assert inbox(owner) == []


def test_at_most_one_email_per_batch_window_and_only_new_operations(propose, reviewer, settings):
    propose("call-1")
    now = timezone.now()
    notify_reviewers(now=now)
    newer = propose("call-2")

    notify_reviewers(now=now + timedelta(minutes=1))
    assert len(inbox(reviewer)) == 1
    notify_reviewers(now=now + timedelta(minutes=settings.OVERSIGHT_NOTIFY_BATCH_MINUTES + 1))
    assert len(inbox(reviewer)) == 2
    assert "1 operation(s) waiting" in inbox(reviewer)[1].subject
    assert f"/operations/{newer.pk}/" in inbox(reviewer)[1].body


def test_nothing_new_sends_nothing(propose, reviewer):
    propose("call-1")
    notify_reviewers()
    later = timezone.now() + timedelta(hours=1)

    assert notify_reviewers(now=later) == 0
    assert len(inbox(reviewer)) == 1


def test_opting_out_stops_the_emails(propose, reviewer):
    Preferences.objects.create(user=reviewer, notify_pending=False)
    propose("call-1")
    notify_reviewers()
    assert inbox(reviewer) == []


def test_auditors_and_outsiders_are_not_notified(propose, auditor, outsider):
    propose("call-1")
    notify_reviewers()
    assert inbox(auditor) == [] and inbox(outsider) == []
