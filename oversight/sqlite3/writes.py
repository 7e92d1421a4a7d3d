"""Writes first, claims after: the web's transactions go before the workers' claims on
SQLite.

SQLite lets one transaction write at a time, and a writer that finds the database
locked sleeps in growing steps (1, 2, 5, 10 … 100 ms) before it tries again. Draining
workers begin their next claim as soon as the last one commits, so the sleeper's tries
rarely found a gap: a reviewer's decision beside eight draining workers waited up to
1.3 s at p95 (``bench/worker_drain.py``). So a transaction holds a shared lock on a file
beside the database (``<database>-writes.lock``) from before it begins until it ends, and
a worker, before each transaction of a claim, waits until no transaction holds it, in
another process or in its own, looking every half millisecond: a decision waits for
the claim in hand at most, not for a queue of them.

Every wait is bounded, and a stopped process delays the others no longer than its
bound: a worker gives way for at most ``GIVE_WAY_SECONDS`` per transaction, and then
begins as before (SQLite's own wait applies); a transaction that cannot take its shared
lock within ``HOLD_SECONDS`` (only a worker stopped in the instant it looks can make that
happen) begins without it; the workers' stall watch (``runs.engine.stalls``) kills a
process stopped while it holds the lock, as it does one holding the database's.
"""

import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar

from django.db import connections

GIVE_WAY_SECONDS = 0.2
HOLD_SECONDS = 0.05
LOOK_EVERY_SECONDS = 0.0005


def writes_file(database: str) -> str:
    """The file whose shared lock says a write is in hand on ``database``."""
    return f"{database}-writes.lock"


class Writes:
    """The transactions in hand in this process on one database (its threads share one
    lock on the file: a lock is the open file's, and two of them in one process would
    make a worker's claim wait for a write of its own process that could never end)."""

    _each: ClassVar[dict[tuple[int, str], "Writes"]] = {}
    _making = threading.Lock()

    def __init__(self, database: str) -> None:
        self.file = open(writes_file(database), "a")  # noqa: SIM115 (held for the process's life)
        self.in_hand = 0
        self.locked = False
        self.mutex = threading.Lock()

    @classmethod
    def of(cls, database: str) -> "Writes":
        """This process's: a child forked after its parent opened the file has a file
        of its own, or parent and child would share one lock."""
        key = (os.getpid(), database)
        with cls._making:
            if key not in cls._each:
                cls._each[key] = cls(database)
            return cls._each[key]

    def hold(self) -> None:
        with self.mutex:
            self.in_hand += 1
            if self.in_hand == 1:
                self.locked = _lock(self.file, fcntl.LOCK_SH, HOLD_SECONDS)

    def let_go(self) -> None:
        with self.mutex:
            self.in_hand -= 1
            if self.in_hand == 0 and self.locked:
                fcntl.flock(self.file, fcntl.LOCK_UN)
                self.locked = False

    def give_way(self) -> None:
        """Wait, for at most ``GIVE_WAY_SECONDS``, until no transaction holds the writes,
        in this process or another."""
        deadline = time.monotonic() + GIVE_WAY_SECONDS
        while True:
            with self.mutex:
                if self.in_hand == 0 and _lock(self.file, fcntl.LOCK_EX, 0):
                    fcntl.flock(self.file, fcntl.LOCK_UN)
                    return
            if time.monotonic() >= deadline:
                return
            time.sleep(LOOK_EVERY_SECONDS)


def _lock(file, kind: int, seconds: float) -> bool:
    """Take the lock ``kind`` on ``file`` if it can be within ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(file, kind | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
        time.sleep(LOOK_EVERY_SECONDS)


@contextmanager
def giving_way(using: str = "default") -> Iterator[None]:
    """Transactions begun in the block on the connection ``using`` give way to the
    others (on SQLite; elsewhere nothing changes)."""
    wrapper = connections[using]
    if not hasattr(wrapper, "gives_way"):
        yield
        return
    wrapper.gives_way = True
    try:
        yield
    finally:
        wrapper.gives_way = False
