"""A worker waits for its turn to claim (SQLite) at most the busy timeout: another
process stopped while it holds the turn does not hang the worker; it waits that long,
then claims without its turn (SQLite's own wait then applies, as before turns)."""

import signal
import threading
import time

import pytest
from django.db import connection

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
