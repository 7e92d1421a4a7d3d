"""Lanes: the effects a worker has in hand, grouped by the target they wait on
(``Operation.lane``: an HTTP host, the mail server, a project's folder, the database).

Each lane has a limit on the effects it may have in flight, so that a slow target holds
at most that many of the worker's slots, and a circuit breaker: after ``failures``
answers in a row that were none (a timeout, a connection not made, a 5xx; the actions
report each exchange through ``target_answered``), the lane pauses. Nothing more of it
is claimed until its backoff has passed; then one effect goes as a trial. An answer
closes the breaker; another failure pauses the lane again for twice as long, up to
``longest``. Effects already in flight carry on, each bounded by its own deadline, and
what they report counts too: one answer closes the breaker at once.

The breakers are this worker's own, learnt from its effects (another worker learns for
itself); ``paused()`` says which are open, for ``/healthz``, ``/metrics`` and the pages
(``WorkerHeartbeat.paused_lanes``). Only the worker's main thread claims, but effects
end and report in their own threads: every change is under one lock.
"""

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone


@dataclass
class Breaker:
    failures: int = 0  # Answers in a row that were none.
    backoff: float = 0.0  # Seconds the lane pauses for, once open.
    opened_at: datetime | None = None  # When the target stopped answering (for people).
    retry_at: float = 0.0  # When a trial may go (``time.monotonic()``).
    trial: bool = False  # The trial is in flight: nothing else goes until it reports.

    @property
    def open(self) -> bool:
        return self.opened_at is not None


class Lanes:
    def __init__(
        self,
        limit: int | None = None,
        failures: int | None = None,
        backoff: float | None = None,
        longest: float | None = None,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.limit = limit or settings.OVERSIGHT_LANE_EFFECTS
        self.failures = failures or settings.OVERSIGHT_LANE_FAILURES
        self.backoff = backoff or settings.OVERSIGHT_LANE_BACKOFF_SECONDS
        self.longest = longest or settings.OVERSIGHT_LANE_LONGEST_BACKOFF_SECONDS
        self.on_change = on_change  # Called (outside the lock) when a breaker opens or closes.
        self.lock = threading.Lock()
        self.in_flight: Counter[str] = Counter()
        self.breakers: dict[str, Breaker] = {}

    def closed(self) -> set[str]:
        """The lanes that may not take another effect now: full, or paused (a breaker
        open whose trial is not due, or is out)."""
        now = time.monotonic()
        with self.lock:
            full = {lane for lane, count in self.in_flight.items() if count >= self.limit}
            paused = {
                lane
                for lane, breaker in self.breakers.items()
                if breaker.open and (breaker.trial or now < breaker.retry_at)
            }
        return full | paused

    def enter(self, lane: str) -> None:
        """An effect of ``lane`` was claimed; if the lane is paused, it is the trial."""
        with self.lock:
            self.in_flight[lane] += 1
            breaker = self.breakers.get(lane)
            if breaker is not None and breaker.open:
                breaker.trial = True

    def leave(self, lane: str) -> None:
        """An effect of ``lane`` ended. A trial that never reached its target (it failed
        before, or made no request) proves nothing: another may go."""
        with self.lock:
            self.in_flight[lane] -= 1
            if not self.in_flight[lane]:
                del self.in_flight[lane]
            breaker = self.breakers.get(lane)
            if breaker is not None and breaker.open and not self.in_flight[lane]:
                breaker.trial = False

    def answered(self, lane: str, healthy: bool) -> None:
        """What one exchange with ``lane``'s target showed."""
        with self.lock:
            breaker = self.breakers.setdefault(lane, Breaker())
            was_open = breaker.open
            if healthy:
                self.breakers.pop(lane)
            else:
                breaker.failures += 1
                if breaker.open and breaker.trial:  # The trial failed: pause for longer.
                    self._pause(breaker, min(breaker.backoff * 2, self.longest))
                elif not breaker.open and breaker.failures >= self.failures:
                    breaker.opened_at = timezone.now()
                    self._pause(breaker, self.backoff)
            changed = was_open != (lane in self.breakers and self.breakers[lane].open)
        if changed:
            self.on_change()

    @staticmethod
    def _pause(breaker: Breaker, seconds: float) -> None:
        breaker.backoff, breaker.trial = seconds, False
        breaker.retry_at = time.monotonic() + seconds

    def paused(self) -> dict[str, dict]:
        """The open breakers, as ``WorkerHeartbeat.paused_lanes`` keeps them."""
        now, wall = time.monotonic(), timezone.now()
        with self.lock:
            return {
                lane: {
                    "since": breaker.opened_at.isoformat(),
                    "failures": breaker.failures,
                    "retry_at": (
                        wall + timedelta(seconds=max(0.0, breaker.retry_at - now))
                    ).isoformat(),
                }
                for lane, breaker in self.breakers.items()
                if breaker.open
            }
