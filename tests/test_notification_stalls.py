"""A worker stopped (SIGSTOP: a GC or VM pause, a debugger) while it holds a claim on a
webhook delivery or a Slack message, its request to the receiver unanswered: the claim
is a time in the row, not a lock, so another worker takes the work over once that time
has passed, and the stopped one, let go, changes nothing of what was done meanwhile.
Real processes: a worker started with ``manage.py runworker``, stopped by the test.

The worker's other lanes go on while one waits for the receiver, so on SQLite the stop
may land while one of them holds the database's write lock. The test then stands for
another worker whole, its stall watch included (``runs.engine.stalls``), which kills the
stopped worker after its bound; the takeover is the same either way."""

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import OperationalError

from runs.clock import db_now
from runs.engine.slack import deliver_slack
from runs.engine.stalls import StallWatch
from runs.engine.webhooks import deliver_webhooks
from runs.models import SlackMessage, WebhookDelivery
from tests.fake_slack import BOT_TOKEN, SIGNING_SECRET
from tests.processes import manage_started, wait_until
from tests.test_slack import slack  # noqa: F401 (fixture)
from tests.webhook_receivers import endpoint

pytestmark = pytest.mark.django_db(transaction=True)

# The worker's HTTP deadline, which with the claim's margin (30 s) bounds its claims.
DEADLINE = "2"
STALL_BOUND_SECONDS = 3.0


class Hold:
    """Holds the first request a fake receiver gets until let go; answers the rest."""

    def __init__(self) -> None:
        self.holding, self.let_go = threading.Event(), threading.Event()
        self.first = True

    def __call__(self) -> None:
        if self.first:
            self.first = False
            self.holding.set()
            self.let_go.wait(120)


def worker_stopped_inside_its_claim(hold: Hold, **env: str) -> subprocess.Popen:
    """A worker, stopped once its first request is being held by the receiver."""
    worker = manage_started(
        "runworker",
        "--name=stopped",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        OVERSIGHT_HTTP_DEADLINE_SECONDS=DEADLINE,
        **env,
    )
    assert hold.holding.wait(60), "the worker never sent its request"
    os.kill(worker.pid, signal.SIGSTOP)
    return worker


def another_worker(deliver: Callable[[], int]) -> Callable[[], bool]:
    """A round of another worker: its stall watch looks, then ``deliver`` runs; true once
    it took one over. A round that found the database's write lock held (the stopped
    worker's) ends, as a worker's step does, and the next is tried."""
    watch = StallWatch(STALL_BOUND_SECONDS)

    def round_taking_over() -> bool:
        if StallWatch.applies():
            watch.look()
        try:
            return deliver() == 1
        except OperationalError:
            return False

    return round_taking_over


def let_go(worker: subprocess.Popen, hold: Hold) -> None:
    """Let the stopped worker go on, as a paused process does, then stop it as its
    supervisor would: it ends the round in hand (recording what it would) and exits.
    One the stall watch killed (it held SQLite's write lock) is gone already."""
    hold.let_go.set()
    if worker.poll() is not None:
        assert worker.returncode == -signal.SIGKILL
        return
    os.kill(worker.pid, signal.SIGCONT)
    worker.terminate()
    assert worker.wait(timeout=60) == 0


def finish(worker: subprocess.Popen) -> None:
    if worker.poll() is None:
        worker.kill()
        worker.wait(timeout=30)


def test_a_webhook_delivery_claimed_by_a_stopped_worker_is_taken_over(project, propose, receiver):
    hook = endpoint(project, receiver.url, ["operation.waiting"])
    hold = Hold()
    receiver.answer = lambda _number, _headers, _body: hold() or 204
    propose("call-1")
    worker = worker_stopped_inside_its_claim(hold)
    try:
        stopped_at = time.monotonic()
        wait_until(another_worker(deliver_webhooks), timeout=90, message="a takeover")
        taken_over_after = time.monotonic() - stopped_at
        let_go(worker, hold)
    finally:
        finish(worker)

    delivery = hook.deliveries.get()
    assert (delivery.status, delivery.attempts) == (WebhookDelivery.Status.DELIVERED, 2)
    assert taken_over_after < float(DEADLINE) + 30 + 5  # the claim's bound, and no more
    # At least once: the receiver got it twice, under one delivery id.
    assert len({headers["Oversight-Delivery"] for headers, _, _ in receiver.posts}) == 1


def test_a_slack_message_claimed_by_a_stopped_worker_is_posted_by_another(
    slack,  # noqa: F811 (fixture)
    propose,
):
    hold = Hold()
    slack.while_posting = hold
    operation = propose("call-1")
    worker = worker_stopped_inside_its_claim(
        hold,
        OVERSIGHT_SLACK_BOT_TOKEN=BOT_TOKEN,
        OVERSIGHT_SLACK_SIGNING_SECRET=SIGNING_SECRET,
        OVERSIGHT_SLACK_API_URL=f"{slack.base}/api/",
    )
    try:
        stopped_at = time.monotonic()
        wait_until(another_worker(deliver_slack), timeout=90, message="a takeover")
        taken_over_after = time.monotonic() - stopped_at
        posted = SlackMessage.objects.get(operation=operation)
        let_go(worker, hold)
    finally:
        finish(worker)

    message = SlackMessage.objects.get(operation=operation)
    assert message.state == SlackMessage.State.POSTED
    assert (message.ts, message.attempts) == (posted.ts, posted.attempts)  # not overwritten
    assert taken_over_after < 2 * float(DEADLINE) + 30 + 5
    # Slack was asked twice (at least once, as after any post whose answer is lost); the
    # stopped worker, whose answer came after its deadline, recorded nothing.
    assert len(slack.called("chat.postMessage")) == 2


def test_a_post_answered_after_its_claim_lapsed_is_deleted(
    slack,  # noqa: F811 (fixture)
    propose,
):
    """Slack answers a post after the claim's time (slow, or its worker was stopped):
    meanwhile another round took the message over and posted it. The late post is
    deleted, not left with buttons that no decision would ever update."""
    operation = propose("call-1")

    def another_round_meanwhile() -> None:
        slack.while_posting = lambda: None  # only the first post is slow
        assert deliver_slack(db_now() + timedelta(minutes=5)) == 1  # past the first claim

    slack.while_posting = another_round_meanwhile

    assert deliver_slack() == 1

    kept = SlackMessage.objects.get(operation=operation)
    assert len(slack.called("chat.postMessage")) == 2
    (deleted,) = slack.called("chat.delete")
    assert deleted["ts"] != kept.ts
    assert list(slack.messages) == [kept.ts]
