"""The rows that long-polls wait on, watched by one thread per process, so that a wait
costs no query of its own while nothing changes and learns of a change within a few
milliseconds on SQLite, 20 on PostgreSQL (each wait used to read its row again every
0.1 s). A wait is awaited: under the production server it holds no thread either.

A wait names marks that change whenever what it waits for may have (an operation's or
a request's ``version``; a token's ``feed_seq`` with its newest entry not numbered yet,
``feed_mark``; whether its token still acts) and the values it last saw. While any wait
is open, the thread reads every watched mark of a kind in one statement: on SQLite only
after ``PRAGMA data_version`` says another connection committed (it reads no table
otherwise), on PostgreSQL every ``POSTGRESQL_POLL_SECONDS``. A wait whose mark moved is
woken; its request then reads what changed itself. The thread ends, and closes its connection,
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
from django.db.models import Exists, OuterRef, Subquery

from runs.models import AgentToken, FeedEvent, HumanRequest, Operation

log = logging.getLogger(__name__)


def _counter(model, column: str) -> Callable[[set[int]], dict]:
    def read(pks: set[int]) -> dict:
        return dict(model.objects.filter(pk__in=pks).values_list("pk", column))

    return read


def feed_marks(pks: set[int]) -> dict:
    """Each token's feed mark: it changes when a reader numbers entries (``feed_seq``)
    and when an entry waiting for its number commits (the newest such)."""
    waiting = FeedEvent.objects.filter(token=OuterRef("pk"), seq__isnull=True).order_by("-pk")
    tokens = AgentToken.objects.filter(pk__in=pks).annotate(
        newest=Subquery(waiting.values("pk")[:1])
    )
    return {pk: (seq, newest) for pk, seq, newest in tokens.values_list("pk", "feed_seq", "newest")}


def acting_tokens(pks: set[int]) -> dict:
    """Whether each token still acts (``AgentToken.acting``): a wait ends when its
    token is revoked, or its owner leaves the project, not when it would have. A token
    this connection cannot see (not committed yet) is left out, as the other counters
    leave out their rows: unchanged, not revoked."""
    acts = Exists(AgentToken.acting().filter(pk=OuterRef("pk")))
    tokens = AgentToken.objects.filter(pk__in=pks).annotate(acts=acts)
    return dict(tokens.values_list("pk", "acts"))


# What a wait may watch: kind -> how to read the marks of some rows, by pk.
COUNTERS = {
    "operation": _counter(Operation, "version"),
    "request": _counter(HumanRequest, "version"),
    "feed": feed_marks,
    "token": acting_tokens,
}
SQLITE_POLL_SECONDS = 0.005
POSTGRESQL_POLL_SECONDS = 0.02
LINGER_SECONDS = 1.0
RETRY_SECONDS = 1.0  # After a failed read (the database restarting, say).


@dataclass(eq=False)
class _Wait:
    marks: list[list]  # [kind, pk, the mark as last read] each.
    wake: Callable[[], None]  # Called from the watching thread.


class Watcher:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waits: set[_Wait] = set()
        self._fresh = False  # Waits added since the last read: read at once.
        self._thread: threading.Thread | None = None

    async def wait(self, seconds: float, *marks: tuple[str, int, object]) -> list:
        """Wait, holding no thread, until any of ``marks`` (a kind of ``COUNTERS``, a
        row's pk, and its mark as last seen) moves, or for ``seconds``; return each
        mark as last read (as given if it did not move)."""
        for kind, _, _ in marks:
            if kind not in COUNTERS:
                raise ValueError(f"nothing watches {kind!r}")
        loop = asyncio.get_running_loop()
        moved = loop.create_future()

        def wake() -> None:
            with suppress(RuntimeError):  # The loop has closed: that wait has ended.
                loop.call_soon_threadsafe(lambda: moved.done() or moved.set_result(None))

        waiting = _Wait([list(mark) for mark in marks], wake)
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
        return [seen for _, _, seen in waiting.marks]

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
    by_kind: dict[str, list[tuple[_Wait, list]]] = defaultdict(list)
    for waiting in waits:
        for mark in waiting.marks:
            by_kind[mark[0]].append((waiting, mark))
    for kind, some in by_kind.items():
        counters = COUNTERS[kind]({pk for _, (_, pk, _) in some})
        for waiting, mark in some:
            now = counters.get(mark[1], mark[2])
            if now != mark[2]:
                mark[2] = now
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
