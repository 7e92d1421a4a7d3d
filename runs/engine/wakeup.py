"""How an idle worker learns at once that there may be work, instead of sleeping out
its idle interval (an approval used to wait up to half a second for its worker).

PostgreSQL: a transition that makes an operation claimable notifies the channel
``WORK_CHANNEL`` (``runs.transitions``; delivered when its transaction commits), and
the worker LISTENs on its own connection. SQLite: ``PRAGMA data_version`` moves
whenever another connection commits; the worker reads it every few milliseconds (no
table is read) and wakes when it moves, which may be for something else: a step that
finds nothing costs a few queries.

``watch()`` before a step, ``wait()`` after it: a change committed while the step ran
wakes the wait at once. Either way the wait ends with its interval, for what falls due
by time alone (an expired lease, a decision's deadline).
"""

import time
from collections.abc import Callable

from django.db import connection

from runs.transitions import WORK_CHANNEL

SQLITE_POLL_SECONDS = 0.005
SLICE_SECONDS = 0.05  # How soon a wait notices SIGTERM, or that an effect ended.


class Wakeup:
    def __init__(self) -> None:
        self.listening = None  # The PostgreSQL connection that LISTENs.
        self.seen = None  # SQLite: (connection, data_version) at watch().

    def watch(self) -> None:
        """Start watching for changes (before a step that looks for work)."""
        connection.ensure_connection()
        if connection.vendor == "postgresql":
            if self.listening is not connection.connection:
                with connection.cursor() as cursor:
                    cursor.execute(f"LISTEN {WORK_CHANNEL}")
                self.listening = connection.connection
            # What was announced before this step, the step will find: only a later
            # announcement may wake the wait after it (a busy worker's backlog would
            # otherwise wake it once for each approval it has already carried out).
            for _ in self.listening.notifies(timeout=0):
                pass
        elif connection.vendor == "sqlite":
            self.seen = (connection.connection, self._data_version())

    def wait(self, seconds: float, stopped: Callable[[], bool] = lambda: False) -> bool:
        """Return when a change since ``watch()`` may have brought work, after
        ``seconds``, or soon after ``stopped()`` (SIGTERM) says so; says whether it was
        woken."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0 and not stopped():
            if self._woken(min(left, SLICE_SECONDS)):
                return True
        return False

    def _woken(self, seconds: float) -> bool:
        if self.listening is not None and self.listening is connection.connection:
            try:
                return any(True for _ in self.listening.notifies(timeout=seconds, stop_after=1))
            except connection.Database.Error:
                # The server dropped the connection (a restart, a failover): the next
                # step connects again, and LISTENs on the new connection.
                self.listening = None
                connection.close()
                return True
        if self.seen is not None and self.seen[0] is connection.connection:
            time.sleep(min(seconds, SQLITE_POLL_SECONDS))
            return self._data_version() != self.seen[1]
        time.sleep(seconds)  # Not watching this connection: a plain idle interval.
        return False

    @staticmethod
    def _data_version() -> int:
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA data_version")
            return cursor.fetchone()[0]
