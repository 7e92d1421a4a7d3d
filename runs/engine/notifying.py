"""Alert deliveries, projects' webhooks and Slack messages, and reviewers' emails in a
lane of their own: a thread of the worker, so that a mail server or a webhook that never
answers holds that thread, never a claim (each delivery may wait up to its timeout, and
ten may be due at once; a round's webhooks are sent together, ``runs.engine.webhooks``,
and so are its Slack messages, ``runs.engine.slack``).

Due deliveries are looked for every second (at once again after a batch); reviewers
are emailed once a minute, and Slack messages of items that stopped waiting without a
decision are closed then too. A worker that runs no thread (a test's, ``runworker
--once``) makes the same rounds in its housekeeping.
"""

import logging
import threading
import time

from django.db import close_old_connections, connections

from runs.clock import db_now
from runs.engine.deliveries import deliver_due
from runs.engine.notifications import notify_reviewers
from runs.engine.slack import close_ended, deliver_slack
from runs.engine.webhooks import deliver_webhooks
from runs.logs import Repeats

log = logging.getLogger(__name__)
DUE_EVERY_SECONDS = 1.0
EMAIL_EVERY_SECONDS = 60.0


class NotificationLane:
    def __init__(self, worker: str) -> None:
        self.worker = worker
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="notifications", daemon=True)
        self.next_emails = 0.0
        self.failures = Repeats(log)  # this thread's

    def start(self) -> None:
        self.thread.start()

    @property
    def running(self) -> bool:
        return self.thread.is_alive()

    def round(self, now) -> bool:
        """Deliver what is due at ``now`` (alerts, webhooks, Slack messages), and email
        reviewers if their minute has come; say whether anything was delivered."""
        delivered = deliver_due(now) + deliver_webhooks(now) + deliver_slack(now) > 0
        if time.monotonic() >= self.next_emails:
            self.next_emails = time.monotonic() + EMAIL_EVERY_SECONDS
            notify_reviewers()
            close_ended()
        return delivered

    def stop(self) -> None:
        """Let the delivery in hand end (bounded by its timeout), then stop."""
        self.stopping.set()
        self.thread.join()

    def _loop(self) -> None:
        try:
            while not self.stopping.is_set():
                close_old_connections()
                more = False  # Something was delivered: more may be due already.
                try:
                    more = self.round(db_now())
                except Exception as error:
                    self.failures.failed(f"worker {self.worker}: notifications", error)
                else:
                    self.failures.worked(f"worker {self.worker}: notifications")
                if not more:
                    self.stopping.wait(DUE_EVERY_SECONDS)
        finally:
            connections.close_all()  # This thread's only.
