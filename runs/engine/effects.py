"""The effects a worker carries out at once, each in a thread of its own.

An effect mostly waits: on an HTTP target, a mail server, a disk. One at a time, a
worker could never do more than one operation per three round trips to its target, so
it hands each claimed operation to a pool of ``size`` threads and claims the next. Each
effect keeps everything it had alone: its own claim, lease, heartbeat, fencing epoch
and transactions (a thread has its own database connection, closed when its effect
ends, so an idle worker holds none). Threads rather than asyncio because an action's
``execute`` is plain blocking code (``http.client``, ``smtplib``, files, the ORM), and
must stay simple to write; the waits release the GIL.

Only the worker's main thread claims, and only into a free slot of a lane that is not
closed (``Lanes``); ``freed`` wakes it when an effect ends. ``finish()`` (on SIGTERM)
lets the effects in hand end: each is bounded by its target's deadline and its lease.
"""

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from django.db import connections

from runs.actions.base import reporting_to
from runs.engine.lanes import Lanes

log = logging.getLogger(__name__)


class Effects:
    def __init__(self, size: int, lanes: Lanes) -> None:
        self.size = size
        self.lanes = lanes
        self.pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix="effect")
        self.lock = threading.Lock()
        self.busy = 0
        self.freed = threading.Event()  # An effect ended since the main thread cleared it.

    @property
    def full(self) -> bool:
        return self.free == 0

    @property
    def free(self) -> int:
        """How many more effects may start now."""
        with self.lock:
            return max(0, self.size - self.busy)

    def closed(self) -> set[str]:
        """The lanes that may not take another effect now."""
        return self.lanes.closed()

    def start(self, lane: str, effect: Callable[[], None]) -> None:
        """Carry out ``effect`` (which never raises) in a thread, in ``lane``."""
        with self.lock:
            self.busy += 1
        self.lanes.enter(lane)
        self.pool.submit(self._carry_out, lane, effect)

    def _carry_out(self, lane: str, effect: Callable[[], None]) -> None:
        try:
            with reporting_to(partial(self.lanes.answered, lane)):
                effect()
        finally:
            self.lanes.leave(lane)
            with self.lock:
                self.busy -= 1
            self.freed.set()
            _close_connections()

    def finish(self) -> None:
        """Wait for the effects in hand to end."""
        self.pool.shutdown(wait=True)


def _close_connections() -> None:
    """Close this thread's connections, so that an idle worker holds none; one that
    fails to close (the server went away) is gone anyway."""
    try:
        connections.close_all()
    except Exception:
        log.warning("an effect's database connection did not close cleanly", exc_info=True)
