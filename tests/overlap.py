"""Proof that the participants of a concurrency test overlapped, not only that the
outcome was right: an outcome reached one after the other proves nothing about the
race a test names.

The participants mark what they do on one ``Timeline``; a holder of a lock
(``hold_until_waited_on``) lets go only once the other party is waiting for it: on
PostgreSQL, seen waiting on a lock in ``pg_stat_activity``; on SQLite (where a wait
for the write lock happens inside the driver and shows nowhere), once the other party
has issued the ``BEGIN IMMEDIATE`` that must wait, marked by ``attempt``. A test then
asserts the order: the other party waited before the holder went on to commit, and
got through after it.
"""

import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from django.db import connection

from tests.processes import wait_until

DEADLINE_SECONDS = 60  # Generous: the machine running the suite may be loaded.


class Timeline:
    """What the participants did, in the order they did it (threads of one process)."""

    def __init__(self) -> None:
        self.marks: list[str] = []
        self.changed = threading.Condition()

    def mark(self, what: str) -> None:
        with self.changed:
            self.marks.append(what)
            self.changed.notify_all()

    def wait_for(self, what: str, seconds: float = DEADLINE_SECONDS) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: what in self.marks, timeout=seconds)

    def assert_order(self, *events: str) -> None:
        missing = [event for event in events if event not in self.marks]
        assert not missing, f"never happened: {missing} (timeline: {self.marks})"
        at = [self.marks.index(event) for event in events]
        assert at == sorted(at), f"expected {list(events)} in this order: {self.marks}"


@contextmanager
def attempt(timeline: Timeline, who: str) -> Iterator[None]:
    """Run the block as ``who``, the party that must wait for a lock another holds:
    marks ``"<who> waits"`` as its first transaction begins (on SQLite; on PostgreSQL
    the holder marks it on seeing the wait) and ``"<who> done"`` when the block ends."""

    def begin_marked(execute, sql, params, many, context):
        if sql.startswith("BEGIN") and f"{who} waits" not in timeline.marks:
            timeline.mark(f"{who} waits")
        return execute(sql, params, many, context)

    try:
        with connection.execute_wrapper(begin_marked):
            yield
    finally:
        timeline.mark(f"{who} done")


def hold_until_waited_on(timeline: Timeline, who: str, holder: str) -> None:
    """Called by ``holder`` while it holds a lock ``who`` needs: return once ``who`` is
    waiting for it (or the deadline passed: the test's ``assert_order`` then fails),
    marking ``"<holder> goes on"`` (to commit, or to write more before it does)."""
    if connection.vendor == "postgresql":
        with suppress(AssertionError):  # The deadline: assert_order says what never happened.
            wait_until(lock_waiters, DEADLINE_SECONDS, "a session waiting on a lock")
            timeline.mark(f"{who} waits")
    else:
        timeline.wait_for(f"{who} waits")
    timeline.mark(f"{holder} goes on")


def lock_waiters() -> int:
    """How many sessions of this test's PostgreSQL database wait on a lock right now (a
    row, a transaction's insert of the same key)."""
    with connection.cursor() as cursor:
        # The statistics are a snapshot taken once per transaction; a holder asks from
        # inside its own.
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


def assert_overlapped(timeline: Timeline, who: str, holder: str) -> None:
    """``who`` began waiting while ``holder`` held the lock, and got through after."""
    timeline.assert_order(f"{who} waits", f"{holder} goes on", f"{who} done")
