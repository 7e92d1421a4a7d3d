"""Batched emails to reviewers about operations waiting for their decision."""

import importlib
import re
import threading
import time
from datetime import timedelta

import pytest
from django.apps import apps as django_apps
from django.core import mail
from django.core.mail.backends.base import BaseEmailBackend
from django.core.mail.backends.locmem import EmailBackend as LocmemBackend
from django.db import connection, transaction
from django.utils import timezone

from runs.clock import db_now
from runs.engine import notifications
from runs.engine.notifications import notify_reviewers
from runs.models import Operation, Preferences
from runs.models.preferences import NotifiedOperation
from runs.services.runs import start_run
from tests.conftest import AGENT
from tests.helpers import decide_on

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
        time.sleep(0.5)  # simulates a slow target
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


def test_operations_created_at_the_same_instant_are_each_listed_once(
    propose, reviewer, settings, monkeypatch
):
    monkeypatch.setattr(notifications, "LISTED", 2)
    waiting = [propose(f"call-{n}").pk for n in range(4)]
    Operation.objects.filter(pk__in=waiting[1:]).update(created_at=timezone.now())
    next_window = timedelta(minutes=settings.OVERSIGHT_NOTIFY_BATCH_MINUTES + 1)

    notify_reviewers()
    notify_reviewers(now=db_now() + next_window)

    first, second = inbox(reviewer)
    assert len(listed(first)) == len(listed(second)) == 2  # Cut between equal created_at,
    assert sorted(listed(first) + listed(second)) == waiting  # and yet none lost.


def test_only_what_still_waits_is_remembered(propose, reviewer, settings):
    """What an email listed is kept while it waits, so that the next emails leave it
    out; decided, it never waits again, and the reviewer's next email forgets it."""
    decided, waiting = propose("call-1"), propose("call-2")
    notify_reviewers()
    decide_on(decided, reviewer)
    newer = propose("call-3")

    notify_reviewers(now=db_now() + timedelta(minutes=settings.OVERSIGHT_NOTIFY_BATCH_MINUTES + 1))

    assert listed(inbox(reviewer)[1]) == [newer.pk]
    remembered = NotifiedOperation.objects.filter(user=reviewer).values_list("operation", flat=True)
    assert sorted(remembered) == [waiting.pk, newer.pk]


def test_the_upgrade_carries_the_watermark_over_and_lists_nothing_twice(propose, reviewer):
    """Before migration 0019 a reviewer's emails had listed what was created up to
    ``last_notified_at``; the upgrade takes those as listed."""
    listed_before, later = propose("call-1"), propose("call-2")
    Preferences.objects.create(user=reviewer, last_notified_at=listed_before.created_at)
    upgrade = importlib.import_module("runs.migrations.0021_notification_order")

    upgrade.carry_over(django_apps, None)
    notify_reviewers()

    (email,) = inbox(reviewer)
    assert listed(email) == [later.pk]


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


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite commits one writer at a time, in order"
)
@pytest.mark.django_db(transaction=True)
def test_a_proposal_that_commits_after_a_later_one_was_emailed_is_in_the_next_email(
    session, propose, reviewer, settings
):
    """Two agents propose at once on PostgreSQL: the first to begin (earlier created_at,
    lower id) commits last, after the other was emailed. It is listed all the same."""
    slow_run = start_run(session=session, goal="Archive the old invoices", actor=AGENT)
    proposed, commit, slow = threading.Event(), threading.Event(), []

    def slow_agent() -> None:
        try:
            with transaction.atomic():
                slow.append(propose("slow", target=slow_run))
                proposed.set()
                assert commit.wait(timeout=10)
        finally:
            connection.close()

    agent = threading.Thread(target=slow_agent)
    agent.start()
    assert proposed.wait(timeout=10)
    fast = propose("fast")
    notify_reviewers()
    commit.set()
    agent.join(timeout=10)
    notify_reviewers(now=db_now() + timedelta(minutes=settings.OVERSIGHT_NOTIFY_BATCH_MINUTES + 1))

    (late,) = slow
    assert (late.created_at, late.pk) < (fast.created_at, fast.pk)  # It began first.
    first, second = inbox(reviewer)
    assert listed(first) == [fast.pk]
    assert listed(second) == [late.pk]
