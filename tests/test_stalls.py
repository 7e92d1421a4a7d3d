"""A process stopped while it holds something (SIGSTOP inside a transaction, the claim
turn) delays others no longer than a bound: PostgreSQL ends a session idle in its
transaction, and on SQLite the other workers kill a process stopped while it holds the
database's write lock, the turn or the writes (``OVERSIGHT_DB_IDLE_IN_TRANSACTION_SECONDS``);
and the feed's numbering shares nothing a run's transaction holds."""

import signal
import subprocess
import sys

import pytest
from django.db import connection

from runs.actors import Actor
from runs.engine.boundaries import INTENT
from runs.engine.stalls import StallWatch
from runs.models import LedgerEntry, Operation
from runs.services.runs import cancel_run, start_run
from tests.conftest import AGENT
from tests.helpers import decide_on
from tests.processes import ROOT, child_env, manage_started, spawn, wait_for_line

pytestmark = pytest.mark.django_db(transaction=True)
# Seconds a process may stay stopped while it holds others up. On PostgreSQL the other
# run's proposal and decision must be seen done while the stopped worker still holds
# its transaction: long enough for them on a loaded machine.
BOUND = "10" if connection.vendor == "postgresql" else "3"
STOPPED = "stopped worker"  # Its application_name in pg_stat_activity.


def stopped_session() -> str | None:
    """The state of the stopped worker's PostgreSQL session (None once ended)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT state FROM pg_stat_activity WHERE application_name = %s", [STOPPED])
        row = cursor.fetchone()
    return row and row[0]


def test_a_worker_stopped_inside_its_claims_transaction_holds_others_up_for_a_bound(
    approved, propose, reviewer, session, admin_user
):
    """The worker stops inside the transaction that claims and carries out a transfer,
    holding its run's lock (and on SQLite the database's and the turn): a proposal and
    a decision in the agent's other run go on while it is still held on PostgreSQL,
    and once the bound has ended the stopped process on SQLite (one writer at a time);
    the admin's cancel of the stopped run completes once the bound ended the stopped
    worker's transaction; the transfer happens at most once."""
    op = approved("ledger")
    other_run = start_run(session=session, goal="Another goal", actor=AGENT)
    bound = {"OVERSIGHT_DB_IDLE_IN_TRANSACTION_SECONDS": BOUND}
    paused = spawn("worker-pause-at", INTENT, PGAPPNAME=STOPPED, **bound)
    wait_for_line(paused, "PAUSED")
    other = manage_started("runworker", "--lease-seconds", "5", **bound)
    try:
        proposed = propose("elsewhere", target=other_run)
        decide_on(proposed, reviewer)
        if connection.vendor == "postgresql":
            assert stopped_session() == "idle in transaction"  # Not waited for.
        else:
            assert paused.poll() == -signal.SIGKILL  # By the other worker, after the bound.
        admin = Actor.of_user(admin_user)
        cancel_run(run=op.run, actor=admin, reason="stop")
        if connection.vendor == "postgresql":
            assert stopped_session() is None  # The cancel waited for the bound to end it.
    finally:
        paused.kill()
        paused.wait(timeout=30)
        other.terminate()
        other.communicate(timeout=60)

    op.refresh_from_db()
    made = LedgerEntry.objects.filter(idempotency_key=op.idempotency_key).count()
    assert (op.status, made) in {(Operation.Status.CANCELLED, 0), (Operation.Status.COMMITTED, 1)}


def holder(lock: str, then: str) -> subprocess.Popen:
    """A process that takes ``lock`` (the claim turn, SQLite's write lock, or the
    writes a web transaction holds) and then stops itself (``then="stop"``) or keeps
    working (``"work"``)."""
    take = {
        "turn": "import fcntl; f = open(turn_file(), 'a'); fcntl.flock(f, fcntl.LOCK_EX)",
        "database": "c = connection.cursor(); c.execute('BEGIN IMMEDIATE')",
        "writes": "Writes.of(connection.settings_dict['NAME']).hold()",
    }[lock]
    working = "time.sleep(60)"  # simulates a slow target: a holder busy with its work
    after = {"stop": "os.kill(os.getpid(), signal.SIGSTOP)", "work": working}[then]
    script = (
        "import os, signal, time, django; django.setup()\n"
        "from django.db import connection\n"
        "from oversight.sqlite3.writes import Writes\n"
        "from runs.engine.turns import turn_file\n"
        f"{take}\nprint('HELD', flush=True)\n{after}\n"
    )
    return subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, env=child_env(), stdout=subprocess.PIPE, text=True
    )


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's locks belong to processes")
@pytest.mark.parametrize("lock", ["turn", "database", "writes"])
def test_a_process_stopped_with_the_turn_the_database_or_the_writes_is_killed_after_the_bound(
    lock,
):
    stopped = holder(lock, "stop")
    try:
        assert stopped.stdout.readline() == "HELD\n"
        watch = StallWatch(bound_seconds=5)
        assert watch.look(now=100.0) == []  # Seen stopped: its time starts.
        assert watch.look(now=104.0) == []
        assert watch.look(now=105.0) == [stopped.pid]
        assert stopped.wait(timeout=10) == -signal.SIGKILL
    finally:
        stopped.kill()


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's locks belong to processes")
def test_a_slow_holder_that_is_not_stopped_is_left_alone():
    working = holder("turn", "work")
    try:
        assert working.stdout.readline() == "HELD\n"
        watch = StallWatch(bound_seconds=5)
        assert watch.look(now=100.0) == watch.look(now=200.0) == []
        assert working.poll() is None
    finally:
        working.kill()
