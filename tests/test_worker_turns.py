"""A worker waits for its turn to claim (SQLite) at most the busy timeout: another
process stopped while it holds the turn does not hang the worker; it waits that long,
then claims without its turn (SQLite's own wait then applies, as before turns). A
worker that finds work keeps its turn for its next claim, for a bound, and lets it go
once it finds none."""

import fcntl
import signal
import threading
import time

import pytest
from django.db import connection

import runs.engine.turns
from runs.engine.boundaries import CLAIMED
from runs.engine.turns import Turns, turn_file
from runs.engine.worker import Worker
from runs.models import Operation
from tests.documentation import page
from tests.test_stalls import holder

pytestmark = pytest.mark.skipif(
    connection.vendor != "sqlite",
    reason="PostgreSQL writes concurrently: its workers take no turns",
)
DOCUMENTED = 20  # seconds
BUSY = 2  # the busy timeout in this test, so that it does not take the documented 20 s
MARGIN = 30


def test_the_busy_timeout_is_the_documented_20_seconds():
    promise = " ".join(page("concepts/operations").split())
    assert f"waits for its turn at most the busy timeout ({DOCUMENTED} s)" in promise
    assert connection.settings_dict["OPTIONS"]["timeout"] == DOCUMENTED


def test_a_worker_waits_for_its_turn_at_most_the_busy_timeout(approved, monkeypatch):
    op = approved("ledger")
    stopped = holder("turn", "stop")  # Takes the turn, then SIGSTOPs itself.
    # A worker that would wait without end gets the turn once this kills the holder, and
    # fails below instead of hanging the run.
    watchdog = threading.Timer(BUSY + MARGIN, stopped.kill)
    try:
        assert stopped.stdout.readline() == "HELD\n"
        monkeypatch.setitem(connection.settings_dict["OPTIONS"], "timeout", BUSY)
        watchdog.start()
        started = time.monotonic()
        assert Worker(name="waiting").step()
        waited = time.monotonic() - started
        assert stopped.poll() is None  # Still stopped with the turn when the worker claimed.
    finally:
        watchdog.cancel()
        stopped.kill()
    assert stopped.wait(timeout=30) == -signal.SIGKILL

    assert Operation.objects.get(pk=op.pk).status == "committed"
    assert BUSY <= waited < BUSY + MARGIN  # It waited for the turn, and not without end.


def turn_is_free() -> bool:
    """Whether another worker could take the turn now."""
    with open(turn_file(), "a") as other:
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(other, fcntl.LOCK_UN)
        return True


def test_a_worker_that_finds_work_keeps_its_turn_for_its_next_claim_for_a_bound(monkeypatch):
    turns = Turns()
    with turns.turn(stopped=lambda: False) as turn:
        turn.keep = True
    assert not turn_is_free()
    with turns.turn(stopped=lambda: False):
        pass  # Found nothing.
    assert turn_is_free()

    monkeypatch.setattr(runs.engine.turns, "KEEP_SECONDS", 0)
    with turns.turn(stopped=lambda: False) as turn:
        turn.keep = True
    assert turn_is_free()  # Kept as long as the bound.


def test_a_worker_lets_its_turn_go_when_it_has_drained_the_queue(approved, at_boundary):
    approved("ledger")
    approved("ledger")
    worker = Worker(name="draining")
    claims = []
    at_boundary(CLAIMED, lambda operation: claims.append(turn_is_free()))
    worker.drain()
    assert len(claims) == 2 and not any(claims)  # Held at each claim...
    assert turn_is_free()  # ...and let go at the end.
    assert worker.step() is False
    assert turn_is_free()
