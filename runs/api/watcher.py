"""The rows that long-polls wait on, watched by one thread per process, so that a wait
costs no query of its own while nothing changes and learns of a change within a few
milliseconds on SQLite, 20 on PostgreSQL (each wait used to read its row again every
0.1 s). A wait is awaited: under the production server it holds no thread either.

A wait names a counter that only grows (an operation's or a request's ``version``, a
token's ``feed_seq``) and the value it last saw. While any wait is open, the thread
reads every watched counter of a kind in one statement: on SQLite only after ``PRAGMA
data_version`` says another connection committed (it reads no table otherwise), on
PostgreSQL every ``POSTGRESQL_POLL_SECONDS``. A wait whose counter moved is woken; its
request then reads what changed itself. The thread ends, and closes its connection,
once no wait has been open for ``LINGER_SECONDS``.
"""

import asyncio
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass

from django.db import connection

from runs.models import AgentToken, HumanRequest, Operation

log = logging.getLogger(__name__)

# What a wait may watch: kind -> (model, counter column).
COUNTERS = {
    "operation": (Operation, "version"),
    "request": (HumanRequest, "version"),
    "feed": (AgentToken, "feed_seq"),
}
SQLITE_POLL_SECONDS = 0.005
POSTGRESQL_POLL_SECONDS = 0.02
LINGER_SECONDS = 1.0
RETRY_SECONDS = 1.0  # After a failed read (the database restarting, say).


@dataclass(eq=False)
class _Wait:
    kind: str
    pk: int
    seen: int
    wake: Callable[[], None]  # Called from the watching thread.


class Watcher:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waits: set[_Wait] = set()
        self._fresh = False  # Waits added since the last read: read at once.
        self._thread: threading.Thread | None = None

    async def wait(self, kind: str, pk: int, seen: int, seconds: float) -> int:
        """Wait, holding no thread, until ``kind``'s counter of row ``pk`` differs from
        ``seen``, or for ``seconds``; return the counter as last read (``seen`` if it
        did not move)."""
        if kind not in COUNTERS:
            raise ValueError(f"nothing watches {kind!r}")
        loop = asyncio.get_running_loop()
        moved = loop.create_future()

        def wake() -> None:
            with suppress(RuntimeError):  # The loop has closed: that wait has ended.
                loop.call_soon_threadsafe(lambda: moved.done() or moved.set_result(None))

        waiting = _Wait(kind, pk, seen, wake)
        try:
            with self._lock:
                self._waits.add(waiting)
                self._fresh = True
                if self._thread is None:
                    thread = threading.Thread(target=self._watch, name="long-polls", daemon=True)
                    thread.start()
                    self._thread = thread
            await asyncio.wait([moved], timeout=seconds)
        finally:
            with self._lock:
                self._waits.discard(waiting)
        return waiting.seen

    def _watch(self) -> None:
        idle_since = None
        version = None
        try:
            while True:
                with self._lock:
                    waits, fresh, self._fresh = list(self._waits), self._fresh, False
                    if waits:
                        idle_since = None
                    elif idle_since is None:
                        idle_since = time.monotonic()
                    elif time.monotonic() - idle_since > LINGER_SECONDS:
                        self._thread = None
                        return
                try:
                    version = self._look(waits, fresh, version)
                except Exception:  # The database restarting, say: never let the waits down.
                    log.warning("long-polls could not read what they wait on", exc_info=True)
                    version = None
                    _close_quietly()
                    time.sleep(RETRY_SECONDS)
        finally:
            with self._lock:  # Ended however: the next wait starts another.
                if self._thread is threading.current_thread():
                    self._thread = None
            _close_quietly()

    def _look(self, waits: list[_Wait], fresh: bool, version: int | None) -> int | None:
        """One round: read the counters if something may have changed, wake the waits
        whose counter moved, and pause. Returns SQLite's data version as read."""
        if connection.vendor != "sqlite" or connection.is_in_memory_db():
            # PostgreSQL tells no cheap "something committed"; nor does an in-memory
            # SQLite database, whose connections share one pager.
            if waits:
                _wake(waits)
            time.sleep(POSTGRESQL_POLL_SECONDS)
            return None
        if waits:
            now = _data_version()  # Before the read: a later commit moves it again.
            if fresh or now != version:
                _wake(waits)
            version = now
        time.sleep(SQLITE_POLL_SECONDS)
        return version


def _wake(waits: list[_Wait]) -> None:
    """Read each kind's watched counters in one statement and wake the waits they
    moved."""
    by_kind: dict[str, list[_Wait]] = defaultdict(list)
    for waiting in waits:
        by_kind[waiting.kind].append(waiting)
    for kind, some in by_kind.items():
        model, column = COUNTERS[kind]
        counters = dict(model.objects.filter(pk__in={w.pk for w in some}).values_list("pk", column))
        for waiting in some:
            now = counters.get(waiting.pk, waiting.seen)
            if now != waiting.seen:
                waiting.seen = now
                waiting.wake()


def _close_quietly() -> None:
    try:
        connection.close()
    except Exception:
        log.warning("long-polls could not close their connection", exc_info=True)


def _data_version() -> int:
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA data_version")
        return cursor.fetchone()[0]


WATCHER = Watcher()
