"""Workers on one SQLite database take turns to claim.

SQLite lets one transaction write at a time, and a writer that finds the database
locked sleeps in growing steps (up to 100 ms) before it tries again. With several
workers, each mostly slept while the lock was free, and each claimed the same first
candidates as the others, only to find them taken: adding workers took throughput
away. So they queue for their claims (which, for an effect inside the database, carry
it out too) on an OS lock on a file beside the database, looking every few
milliseconds; a killed holder releases it by dying. A worker that waited as long as
SQLite's busy timeout, or is asked to stop, goes ahead without its turn (SQLite's own
wait then applies, as before). The rest of a step (housekeeping, an effect outside the
database) needs no turn, though a worker keeps its turn while it finds work (``Turns``).
PostgreSQL writes concurrently, and needs none. A holder
stopped with its turn is killed after a bound by the other workers (``runs.engine.stalls``),
which releases it.
"""

import fcntl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO

from django.db import connection

LOOK_EVERY_SECONDS = (0.001, 0.002, 0.004)  # Then every 4 ms.
KEEP_SECONDS = 0.5


class Turns:
    """A worker's turn, kept from one claim to the next while each finds work, for up to
    ``KEEP_SECONDS``: passed from process to process at every claim, the turn cost
    each a cold start (SQLite drops a connection's cache of the database's pages when
    another connection has written), and eight workers drained transfers 28 % slower
    than one. Kept, the others wait for their turn as they would anyway (one writer at a
    time), and a worker that found nothing, is full or is stopping passes it on."""

    def __init__(self) -> None:
        self.file: IO | None = None
        self.since: float | None = None  # When this process took the turn it holds.
        self.keep = False  # Set inside ``turn()``: keep it for the next claim.

    @contextmanager
    def turn(self, stopped: Callable[[], bool]) -> Iterator["Turns"]:
        """Hold this process's turn to claim (on SQLite) while the block runs; passed
        on at the end unless the block set ``keep`` (and it was taken less than
        ``KEEP_SECONDS`` ago)."""
        if self.since is None and self._needed() and self._take(stopped):
            self.since = time.monotonic()
        self.keep = False
        try:
            yield self
        finally:
            if not (self.keep and self.since and time.monotonic() - self.since < KEEP_SECONDS):
                self.pass_on()

    def pass_on(self) -> None:
        """Let the turn go, if this process holds it."""
        if self.since is not None:
            fcntl.flock(self.file, fcntl.LOCK_UN)
            self.since = None

    def _needed(self) -> bool:
        return connection.vendor == "sqlite" and not connection.is_in_memory_db()

    def _take(self, stopped: Callable[[], bool]) -> bool:
        if self.file is None:
            self.file = open(turn_file(), "a")  # noqa: SIM115 (held for the process's life)
        deadline = time.monotonic() + connection.settings_dict["OPTIONS"].get("timeout", 5)
        looks = 0
        while True:
            try:
                fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if stopped() or time.monotonic() >= deadline:
                    return False
            time.sleep(LOOK_EVERY_SECONDS[min(looks, len(LOOK_EVERY_SECONDS) - 1)])
            looks += 1


def turn_file() -> str:
    """The file whose lock is the turn, beside the database."""
    return f"{connection.settings_dict['NAME']}-claims.lock"
