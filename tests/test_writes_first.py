"""On SQLite, a reviewer's decision (any transaction outside a worker's claims) goes
before the workers' claims: it holds the writes while it runs, and each transaction of
a claim waits until no one holds them, in another process or its own; bounded, so that a
process that holds them forever delays claims, never stops them. A write that finds a
claim in hand looks again every half millisecond instead of in SQLite's growing sleeps,
and still waits as long as the busy timeout."""

import fcntl
import subprocess
import sys
import threading

import pytest
from django.db import connection, transaction

import oversight.sqlite3.writes
from oversight.sqlite3.writes import giving_way, writes_file
from runs.engine.worker import Worker
from runs.models import Operation
from runs.transitions import record_run_event
from tests.conftest import AGENT
from tests.processes import ROOT, child_env
from tests.test_stalls import holder

pytestmark = [
    pytest.mark.skipif(connection.vendor != "sqlite", reason="PostgreSQL locks rows"),
    pytest.mark.django_db(transaction=True),
]


def held_elsewhere() -> bool:
    """Whether a transaction holds the writes, as another process would find."""
    with open(writes_file(connection.settings_dict["NAME"]), "a") as other:
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        return False


def test_a_transaction_holds_the_writes_until_it_ends_and_a_claim_holds_none(run):
    with transaction.atomic():
        record_run_event(run=run, actor=AGENT, event="test.decision")
        assert held_elsewhere()
    assert not held_elsewhere()
    with giving_way(), transaction.atomic():
        record_run_event(run=run, actor=AGENT, event="test.claim")
        assert not held_elsewhere()
    with pytest.raises(ValueError), transaction.atomic():  # Rolled back.
        assert held_elsewhere()
        raise ValueError
    assert not held_elsewhere()


def test_a_worker_claims_only_once_a_write_in_another_process_has_ended(approved, monkeypatch):
    monkeypatch.setattr(oversight.sqlite3.writes, "GIVE_WAY_SECONDS", 60)
    op = approved("ledger")
    writer = holder("writes", "work")
    try:
        assert writer.stdout.readline() == "HELD\n"
        worker = threading.Thread(target=drain)
        worker.start()
        worker.join(timeout=1)
        assert worker.is_alive()  # Giving way.
        op.refresh_from_db()
        assert op.status == Operation.Status.APPROVED
        writer.kill()  # Its write ends: its lock goes with it.
        worker.join(timeout=60)
        assert not worker.is_alive()
    finally:
        writer.kill()
    op.refresh_from_db()
    assert op.status == Operation.Status.COMMITTED


def drain() -> None:
    try:
        Worker("giving way").drain()
    finally:
        connection.close()


def test_a_process_that_holds_the_writes_forever_delays_the_claims_but_never_stops_them(
    approved,
):
    ops = [approved("ledger") for _ in range(3)]
    writer = holder("writes", "work")
    try:
        assert writer.stdout.readline() == "HELD\n"
        drain()
    finally:
        writer.kill()
    committed = Operation.objects.filter(pk__in=[op.pk for op in ops], status="committed")
    assert committed.count() == 3


def test_a_write_waits_for_a_claim_in_hand_as_long_as_the_busy_timeout(run):
    """A claim holds the database: the write waits (rather than failing at once without
    SQLite's busy wait), begins once the claim commits, and the busy timeout is back
    after."""
    claim = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, django; django.setup()\n"
            "from django.db import connection\n"
            "c = connection.cursor(); c.execute('BEGIN IMMEDIATE')\n"
            "print('HELD', flush=True); sys.stdin.readline(); c.execute('COMMIT')\n",
        ],
        cwd=ROOT,
        env=child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    failed = []

    def decide() -> None:
        try:
            with transaction.atomic():
                record_run_event(run=run, actor=AGENT, event="test.decision")
        except Exception as error:
            failed.append(error)
        finally:
            connection.close()

    try:
        assert claim.stdout.readline() == "HELD\n"
        decision = threading.Thread(target=decide)
        decision.start()
        decision.join(timeout=1)
        assert decision.is_alive() and not failed  # Waiting.
        claim.communicate("commit\n", timeout=30)
        decision.join(timeout=30)
        assert not decision.is_alive() and not failed
    finally:
        claim.kill()
    assert run.checkpoints.filter(event="test.decision").exists()
    timeout = connection.settings_dict["OPTIONS"]["timeout"]
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout")
        assert cursor.fetchone()[0] == timeout * 1000
