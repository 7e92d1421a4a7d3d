"""A worker's hold on the operation it drives: kept alive by a heartbeat while the
action runs, and confirmed immediately before every effect fires — except an effect
inside the database carried out in the claim's own transaction, which needs neither:
nothing of its claim is committed, so no other worker can take the operation over.

Both are conditional updates in the database's clock: the lease is extended only if
the fencing epoch is still this worker's and the lease has not lapsed. A worker that
paused past its lease (a GC or VM pause, SIGSTOP, a slow call) therefore learns on
waking that another worker may hold the operation, and fires nothing further. No check
can close the last window by itself — a process can pause right after it — so the
target's own guarantee decides what happens then (``Action.deduplicates``).
"""

import contextvars
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from django.db import connection, connections, transaction
from django.db.models import DateTimeField, ExpressionWrapper, Value
from django.db.models.functions import Now

from runs.engine.claims import LEASED
from runs.models import Operation, Run
from runs.transitions import lock_run

log = logging.getLogger(__name__)


class LeaseLost(Exception):
    """The operation is no longer this worker's: it fires nothing and records nothing."""


class Lease:
    def __init__(self, operation: Operation, length: timedelta) -> None:
        self.operation = operation
        self.length = length
        # The epoch this worker claimed with; the operation's own may move on.
        self.epoch = operation.fencing_epoch
        self.lost = threading.Event()

    def renew(self) -> bool:
        """Extend the lease to ``length`` from now, if it is still ours and live."""
        renewed = Operation.objects.filter(
            pk=self.operation.pk,
            fencing_epoch=self.epoch,
            status__in=LEASED,
            lease_expires_at__gt=Now(),
        ).update(
            lease_expires_at=ExpressionWrapper(
                Now() + Value(self.length), output_field=DateTimeField()
            )
        )
        if not renewed:
            self.lost.set()
        return bool(renewed)

    def confirm(self) -> Run:
        """Immediately before an effect: renew under the run lock, or ``LeaseLost``;
        returns the locked run. Called inside a transaction, the lock holds until that
        transaction commits, so an effect written in it cannot interleave with a
        takeover."""
        with transaction.atomic():
            run = lock_run(self.operation.run_id)
            if self.lost.is_set() or not self.renew():
                raise LeaseLost(
                    f"operation {self.operation.pk}: epoch {self.epoch} no longer holds "
                    "its lease; another worker may have taken it over"
                )
        return run

    @contextmanager
    def kept(self) -> Iterator["Lease"]:
        """Renew the lease every third of its length while the body runs."""
        stop = threading.Event()
        # In a copy of this context: its log lines name the operation as the caller's do.
        beat = threading.Thread(
            target=contextvars.copy_context().run,
            args=(self._beat, stop),
            name=f"lease-{self.operation.pk}",
            daemon=True,
        )
        beat.start()
        try:
            yield self
        finally:
            stop.set()
            beat.join()

    def _beat(self, stop: threading.Event) -> None:
        try:
            while not stop.wait(self.length.total_seconds() / 3):
                try:
                    if not self.renew():
                        return
                except Exception as error:  # Busy or gone: the next beat (or confirm) decides.
                    log.warning("lease of operation %s not renewed: %s", self.operation.pk, error)
                    connection.close_if_unusable_or_obsolete()
        finally:
            connections.close_all()  # This thread's connections only.
