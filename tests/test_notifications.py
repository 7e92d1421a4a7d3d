"""Batched emails to reviewers about operations waiting for their decision."""

import re
import threading
import time
from datetime import timedelta

import pytest
from django.core import mail
from django.core.mail.backends.base import BaseEmailBackend
from django.core.mail.backends.locmem import EmailBackend as LocmemBackend
from django.db import connection
from django.utils import timezone

from runs.clock import db_now
from runs.engine import notifications
from runs.engine.notifications import notify_reviewers
from runs.models import Operation, Preferences

LOCMEM = "django.core.mail.backends.locmem.EmailBackend"


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


def listed(email) -> list[int]:
    return [int(pk) for pk in re.findall(r"/operations/(\d+)/", email.body)]


class BrokenBackend(BaseEmailBackend):
    """A mail server that is down."""

    def send_messages(self, messages) -> int:
        raise ConnectionRefusedError("the mail server is down")


class SlowBackend(LocmemBackend):
    """A mail server that takes its time, so two workers' sends overlap."""

    def send_messages(self, messages) -> int:
        time.sleep(0.5)
        return super().send_messages(messages)


def test_a_failed_send_loses_nothing_and_the_next_round_sends_the_batch(
    propose, reviewer, settings
):
    waiting = [propose(f"call-{n}").pk for n in range(3)]
    settings.MAILERS = {"default": {"BACKEND": "tests.test_notifications.BrokenBackend"}}

    assert notify_reviewers() == 0
    preferences = Preferences.of(reviewer)
    assert (preferences.last_notified_at, preferences.notify_claimed_until) == (None, None)

    settings.MAILERS = {"default": {"BACKEND": LOCMEM}}
    assert notify_reviewers() == 1  # At once: a failed send does not open a batch window.
    (email,) = inbox(reviewer)
    assert "3 operation(s) waiting" in email.subject
    assert listed(email) == waiting


def test_many_waiting_operations_are_all_counted_then_all_listed(propose, reviewer, settings):
    waiting = [propose(f"call-{n}").pk for n in range(60)]
    next_window = timedelta(minutes=settings.OVERSIGHT_NOTIFY_BATCH_MINUTES + 1)

    notify_reviewers()
    notify_reviewers(now=db_now() + next_window)
    notify_reviewers(now=db_now() + 2 * next_window)

    first, second = inbox(reviewer)
    assert "60 operation(s) waiting" in first.subject
    assert "…and 10 more" in first.body
    assert "10 operation(s) waiting" in second.subject
    assert listed(first) + listed(second) == waiting


def test_operations_created_at_the_same_instant_are_listed_together(
    propose, reviewer, settings, monkeypatch
):
    monkeypatch.setattr(notifications, "LISTED", 2)
    first, *same_instant = [propose(f"call-{n}").pk for n in range(4)]
    Operation.objects.filter(pk__in=same_instant).update(created_at=timezone.now())

    notify_reviewers()

    (email,) = inbox(reviewer)
    assert listed(email) == [first, *same_instant]  # Not cut between equal created_at.


@pytest.mark.django_db(transaction=True)
def test_two_workers_at_once_send_one_email_per_reviewer(propose, reviewer, reviewer2, settings):
    propose("call-1")
    settings.MAILERS = {"default": {"BACKEND": "tests.test_notifications.SlowBackend"}}
    start, sent = threading.Barrier(2), []

    def worker() -> None:
        try:
            start.wait(timeout=10)
            sent.append(notify_reviewers())
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sum(sent) == 2
    assert len(inbox(reviewer)) == 1
    assert len(inbox(reviewer2)) == 1
