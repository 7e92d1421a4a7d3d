"""Batched emails to reviewers about operations and human requests (#34) waiting for
their decision."""

import importlib
import re
import threading
import time
from datetime import datetime, timedelta

import pytest
from django.apps import apps as django_apps
from django.core import mail
from django.core.mail.backends.base import BaseEmailBackend
from django.core.mail.backends.locmem import EmailBackend as LocmemBackend
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from runs.clock import db_now
from runs.engine import notifications
from runs.engine.notifications import notify_reviewers
from runs.models import HumanRequest, Operation, Preferences
from runs.models.preferences import NotifiedOperation, NotifiedRequest
from runs.services import requests as asking
from runs.services.proposals import propose_operation
from runs.services.runs import open_session, start_run
from tests.conftest import AGENT, issued
from tests.helpers import decide_on

LOCMEM = "django.core.mail.backends.locmem.EmailBackend"


def inbox(user) -> list:
    return [message for message in mail.outbox if message.to == [user.email]]


@pytest.fixture
def ask(session, agent_token):
    """Ask people as the test agent's token, on a run of the session's own (or
    ``target``): a run waiting for an answer takes no proposals, and ``run`` keeps
    taking them."""
    asking_run = start_run(session=session, goal="Ship the release", actor=AGENT)

    def _ask(prompt: str = "May I ship the release?", *, target=None, **fields) -> HumanRequest:
        request, _new = asking.ask(
            run=target or asking_run, prompt=prompt, actor=AGENT, token=agent_token, **fields
        )
        return request

    return _ask


def next_window(settings, windows: int = 1) -> datetime:
    """A time when the batch window of the email sent ``windows - 1`` windows ago ended."""
    return db_now() + windows * timedelta(minutes=settings.OVERSIGHT_NOTIFY_BATCH_MINUTES + 1)


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


def asked(email) -> list[int]:
    """The requests ``email`` lists, in its order."""
    return [int(pk) for pk in re.findall(r"/requests/(\d+)/", email.body)]


def test_open_requests_join_the_email_with_what_the_agent_asks(
    propose, ask, reviewer, owner, settings
):
    op = propose("call-1")
    question = ask("Which account pays?\nSee https://evil.example/pay", kind="question")
    sign_off = ask("May I ship the release?")

    assert notify_reviewers() == 1
    (email,) = inbox(reviewer)
    assert email.subject == "[Oversight] 1 operation(s) and 2 request(s) waiting for your decision"
    assert listed(email) == [op.pk] and asked(email) == [question.pk, sign_off.pk]
    base = settings.OVERSIGHT_BASE_URL.rstrip("/")
    # Oversight's line and link, then the agent's words, each line quoted: its link
    # cannot pass for Oversight's.
    assert (
        f"Request {question.pk} (Question) in run {question.run_id}: "
        f"{base}/requests/{question.pk}/\n"
        "What the agent asks:\n> Which account pays?\n> See https://evil.example/pay\n"
    ) in email.body
    assert f"Request {sign_off.pk} (Sign-off) in run {sign_off.run_id}" in email.body
    assert inbox(owner) == []  # They own the run: not theirs to answer.


def test_requests_alone_are_counted_as_requests(ask, reviewer):
    ask()

    notify_reviewers()

    (email,) = inbox(reviewer)
    assert email.subject == "[Oversight] 1 request(s) waiting for your decision"
    assert "Operations waiting" not in email.body


def test_a_request_asked_after_an_email_is_in_the_next_one_alone(ask, reviewer, settings):
    first = ask("May I ship the release?")
    notify_reviewers()
    second = ask("Which tag?", kind="question")

    assert notify_reviewers(now=db_now() + timedelta(minutes=1)) == 0  # The window is open.
    notify_reviewers(now=next_window(settings))

    earlier, later = inbox(reviewer)
    assert asked(earlier) == [first.pk]
    assert asked(later) == [second.pk]
    assert "1 request(s) waiting" in later.subject


def test_a_request_answered_before_the_email_is_not_listed(ask, reviewer, reviewer2):
    answered, waiting = ask("May I ship the release?"), ask("May I tag it?")
    asking.answer(request=answered, reviewer=reviewer2, kind="approve", version=answered.version)

    notify_reviewers()

    (email,) = inbox(reviewer)
    assert asked(email) == [waiting.pk]
    assert "1 request(s) waiting" in email.subject


def test_what_an_agent_token_of_theirs_asked_or_proposed_is_not_theirs_to_decide(
    project, owner, reviewer, reviewer2
):
    """Four eyes (``own_interest``): the run is the owner's, but the agent acting in it
    does so with the reviewer's token; the reviewer's email would lead to a page that
    refuses them."""
    token = issued(project, "reviewer-agent", reviewer)
    session = open_session(project=project, owner=owner, agent="their-agent", token=token)
    run = start_run(session=session, goal="Tidy the ledger", actor=AGENT)
    op = propose_on(run, token)
    request, _new = asking.ask(run=run, prompt="May I?", actor=AGENT, token=token)

    notify_reviewers()

    assert inbox(reviewer) == []
    (email,) = inbox(reviewer2)
    assert (listed(email), asked(email)) == ([op.pk], [request.pk])


def propose_on(run, token) -> Operation:
    return propose_operation(
        run=run,
        call_id="call-1",
        action="ledger.transfer",
        arguments={"from": "A", "to": "B", "amount": 100},
        risk=Operation.Risk.MEDIUM,
        rollback_kind=Operation.RollbackKind.COMPENSATING,
        base_version=run.version,
        actor=AGENT,
        token=token,
    )


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
    propose, ask, reviewer, settings
):
    waiting = [propose(f"call-{n}").pk for n in range(3)]
    request = ask()
    settings.MAILERS = {"default": {"BACKEND": "tests.test_notifications.BrokenBackend"}}

    assert notify_reviewers() == 0
    preferences = Preferences.of(reviewer)
    assert (preferences.last_notified_at, preferences.notify_claimed_until) == (None, None)

    settings.MAILERS = {"default": {"BACKEND": LOCMEM}}
    assert notify_reviewers() == 1  # At once: a failed send does not open a batch window.
    (email,) = inbox(reviewer)
    assert "3 operation(s) and 1 request(s) waiting" in email.subject
    assert listed(email) == waiting and asked(email) == [request.pk]


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


def test_many_open_requests_are_all_counted_then_all_listed(
    propose, ask, reviewer, settings, monkeypatch
):
    """Each kind has its own ``LISTED``: the requests do not push the operations out."""
    monkeypatch.setattr(notifications, "LISTED", 2)
    op = propose("call-1")
    waiting = [ask(f"Question {n}?", kind="question").pk for n in range(5)]

    for windows in range(4):
        notify_reviewers(now=next_window(settings, windows))

    first, second, third = inbox(reviewer)
    assert first.subject == "[Oversight] 1 operation(s) and 5 request(s) waiting for your decision"
    assert listed(first) == [op.pk]
    assert "…and 3 more requests, listed in the next email" in first.body
    assert "3 request(s) waiting" in second.subject and "…and 1 more requests" in second.body
    assert asked(first) + asked(second) + asked(third) == waiting


def test_an_email_reads_as_many_queries_however_much_waits(
    propose, ask, owner, reviewer, reviewer2, settings, monkeypatch
):
    """A fixed number of queries per reviewer, whether a few or many operations and
    requests wait (and whether a few or many were listed before)."""
    monkeypatch.setattr(notifications, "LISTED", 2)
    for user in (owner, reviewer, reviewer2):
        Preferences.of(user)  # Else made by their first round: three queries more.

    def round_with(waiting: int, windows: int) -> int:
        for n in range(waiting):
            propose(f"call-{windows}-{n}")
            ask(f"Question {windows}-{n}?", kind="question")
        with CaptureQueriesContext(connection) as queries:
            assert notify_reviewers(now=next_window(settings, windows)) == 2
        assert len(asked(mail.outbox[-1])) == len(listed(mail.outbox[-1])) == 2
        return len(queries)

    assert round_with(3, 0) == round_with(12, 1) == round_with(1, 2)


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


def test_only_what_still_waits_is_remembered(propose, ask, reviewer, settings):
    """What an email listed is kept while it waits, so that the next emails leave it
    out; decided (answered), it never waits again, and the reviewer's next email
    forgets it."""
    decided, waiting = propose("call-1"), propose("call-2")
    answered, open_request = ask("May I ship?"), ask("May I tag?")
    notify_reviewers()
    decide_on(decided, reviewer)
    answered.refresh_from_db()
    asking.answer(request=answered, reviewer=reviewer, kind="approve", version=answered.version)
    newer, newer_request = propose("call-3"), ask("May I announce it?")

    notify_reviewers(now=next_window(settings))

    assert listed(inbox(reviewer)[1]) == [newer.pk]
    assert asked(inbox(reviewer)[1]) == [newer_request.pk]
    remembered = NotifiedOperation.objects.filter(user=reviewer).values_list("operation", flat=True)
    assert sorted(remembered) == [waiting.pk, newer.pk]
    remembered = NotifiedRequest.objects.filter(user=reviewer).values_list("request", flat=True)
    assert sorted(remembered) == [open_request.pk, newer_request.pk]


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
def test_two_workers_at_once_send_one_email_per_reviewer(
    propose, ask, reviewer, reviewer2, settings
):
    op, request = propose("call-1"), ask()
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
    for user in (reviewer, reviewer2):
        (email,) = inbox(user)
        assert (listed(email), asked(email)) == ([op.pk], [request.pk])


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite commits one writer at a time, in order"
)
@pytest.mark.django_db(transaction=True)
def test_what_commits_after_a_later_one_was_emailed_is_in_the_next_email(
    session, propose, ask, reviewer, settings
):
    """Two agents propose and ask at once on PostgreSQL: the first to begin (earlier
    created_at, lower ids) commits last, after the other's were emailed. Its operation
    and request are listed all the same."""
    slow_run = start_run(session=session, goal="Archive the old invoices", actor=AGENT)
    proposed, commit, slow = threading.Event(), threading.Event(), []

    def slow_agent() -> None:
        try:
            with transaction.atomic():
                slow.append(propose("slow", target=slow_run))
                slow.append(ask("May I archive them?", target=slow_run))
                proposed.set()
                assert commit.wait(timeout=10)
        finally:
            connection.close()

    agent = threading.Thread(target=slow_agent)
    agent.start()
    assert proposed.wait(timeout=10)
    fast, fast_request = propose("fast"), ask("May I pay it?")
    notify_reviewers()
    commit.set()
    agent.join(timeout=10)
    notify_reviewers(now=next_window(settings))

    late, late_request = slow
    assert (late.created_at, late.pk) < (fast.created_at, fast.pk)  # It began first.
    assert (late_request.created_at, late_request.pk) < (fast_request.created_at, fast_request.pk)
    first, second = inbox(reviewer)
    assert (listed(first), asked(first)) == ([fast.pk], [fast_request.pk])
    assert (listed(second), asked(second)) == ([late.pk], [late_request.pk])
