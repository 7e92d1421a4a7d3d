"""Ending what a stopped process holds on SQLite.

PostgreSQL ends the session of a process idle inside its transaction
(``OVERSIGHT_DB_IDLE_IN_TRANSACTION_SECONDS``). SQLite has no sessions: its write lock
belongs to a process, and one stopped while it holds the lock (SIGSTOP, a paused VM)
holds up every writer of the database, web requests included, until it is continued;
one stopped while it holds the workers' claim turn (``runs.engine.turns``) makes every
other worker wait for the turn at each step, and one stopped inside a transaction that
holds the writes (``oversight.sqlite3.writes``) makes each claim wait for its bound. So
every worker looks, once a second, at who holds those locks, as the kernel lists them in
``/proc/locks``: WAL's write lock (a POSIX lock on byte 120 of the ``-shm`` file), the
turn's file and the writes' file. A holder seen
stopped (state ``T``) for that same bound is killed with SIGKILL, which is what ends its
transaction: SQLite rolls it back, and its claim is taken over through verification, as
after any crash. A holder that is only slow, or stopped by a debugger (``t``), is left
alone. When each holder was first seen stopped is kept in a file beside the database,
so that a worker started meanwhile (or all of them, in turn) does not count from zero.
Where there is no ``/proc/locks`` (not Linux), nothing is watched.
"""

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path

from django.db import connection

from oversight.sqlite3.writes import writes_file
from runs.engine.turns import turn_file

log = logging.getLogger(__name__)
LOCKS = Path("/proc/locks")
WAL_WRITE_LOCK = 120  # WALINDEX_LOCK_OFFSET + WAL_WRITE_LOCK in SQLite's os_unix.c.
LOOK_EVERY_SECONDS = 1.0


class StallWatch:
    def __init__(self, bound_seconds: float) -> None:
        self.bound = bound_seconds

    @classmethod
    def applies(cls) -> bool:
        return connection.vendor == "sqlite" and not connection.is_in_memory_db() and LOCKS.exists()

    def look(self, now: float | None = None) -> list[int]:
        """One look: note the holders seen stopped, kill those stopped for the bound;
        returns the pids killed. ``now`` is the wall clock, which every process on the
        host shares."""
        now = time.time() if now is None else now
        stopped = {pid for pid in _holders(_watched_files()) if _is_stopped(pid)}
        seen = _seen_stopped()
        since = {pid: seen.get(pid, now) for pid in stopped}
        killed = [pid for pid, first in since.items() if now - first >= self.bound]
        _note_stopped({pid: first for pid, first in since.items() if pid not in killed})
        for pid in killed:
            log.error(
                "process %s held the database's write lock, the turn or the writes while stopped "
                "for %s s: killed, so that SQLite rolls its transaction back",
                pid,
                self.bound,
            )
            _kill(pid)
        return killed

    def watching(self, stopped: Callable[[], bool]) -> threading.Thread:
        """A daemon thread looking every second until ``stopped()``."""
        thread = threading.Thread(target=self._watch, args=(stopped,), name="stalls", daemon=True)
        thread.start()
        return thread

    def _watch(self, stopped: Callable[[], bool]) -> None:
        while not stopped():
            try:
                self.look()
            except OSError:
                log.warning("could not look for stopped lock holders", exc_info=True)
            time.sleep(LOOK_EVERY_SECONDS)


def _seen_file() -> Path:
    return Path(f"{connection.settings_dict['NAME']}-stalls.json")


def _seen_stopped() -> dict[int, float]:
    """When each holder was first seen stopped, by any worker."""
    try:
        return {int(pid): first for pid, first in json.loads(_seen_file().read_text()).items()}
    except (FileNotFoundError, ValueError):
        return {}


def _note_stopped(since: dict[int, float]) -> None:
    """Write the holders seen stopped, whole (a rename): a reader never sees half."""
    path = _seen_file()
    partial = path.with_name(f"{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(since))
    os.replace(partial, path)


def _watched_files() -> dict[int, str]:
    """The inodes of the locks watched, by what holds them."""
    name = connection.settings_dict["NAME"]
    watched = {}
    for path, kind in (
        (f"{name}-shm", "database"),
        (turn_file(), "turn"),
        (writes_file(name), "writes"),
    ):
        try:
            watched[os.stat(path).st_ino] = kind
        except FileNotFoundError:
            continue  # Not made yet: nobody holds it.
    return watched


def _holders(watched: dict[int, str]) -> Iterator[int]:
    """The pids holding WAL's write lock, the turn or the writes (shared: ``READ``),
    from ``/proc/locks`` lines such as ``3: POSIX  ADVISORY  WRITE 21791 fe:00:2146922
    120 120``."""
    for line in LOCKS.read_text().splitlines():
        fields = line.split()
        if "->" in fields or len(fields) < 8:
            continue  # A waiter ("-> POSIX …"), not a holder.
        _, _, _, mode, pid, device_inode, start, _ = fields[:8]
        kind = watched.get(int(device_inode.rsplit(":", 1)[1]))
        if kind is None or int(pid) == os.getpid() or (mode != "WRITE" and kind != "writes"):
            continue
        if kind != "database" or start == str(WAL_WRITE_LOCK):
            yield int(pid)


def _is_stopped(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False  # Gone.
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def _kill(pid: int) -> None:
    with suppress(ProcessLookupError):  # It ended by itself meanwhile.
        os.kill(pid, signal.SIGKILL)
