"""Workers as real processes: racing for the same operations, draining a backlog
together on PostgreSQL, and stopping cleanly on SIGTERM."""

import fcntl
import itertools
import os
import signal
import subprocess
import sys
import threading
from contextlib import suppress
from pathlib import Path

import pytest
from django.db import connection

from runs.engine.turns import turn_file
from runs.models import ApprovalPolicy, Checkpoint, Operation
from runs.services.runs import start_run
from tests.conftest import AGENT, http_arguments
from tests.overlap import DEADLINE_SECONDS
from tests.processes import ROOT, child_env, wait_until
from tests.telling_worker import told

pytestmark = pytest.mark.django_db(transaction=True)


def start_workers(count: int, *args: str, **env: str) -> list[subprocess.Popen]:
    return [
        subprocess.Popen(
            [sys.executable, "manage.py", "runworker", "--name", f"w{n}", *args],
            cwd=ROOT,
            env={**child_env(), **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(count)
    ]


def wait_all(workers: list[subprocess.Popen], timeout: float = 300) -> None:
    for worker in workers:
        _, err = worker.communicate(timeout=timeout)
        assert worker.returncode == 0, err


@pytest.fixture
def auto_approved(project, session, propose, target):
    """``auto_approved(runs, per_run)``: operations approved by policy against the target
    that ignores idempotency keys, so a double execution would show as a count of 2."""
    ApprovalPolicy.objects.create(project=project, action="http.request", approvals_required=0)

    def make(runs: int, per_run: int) -> list[Operation]:
        operations = []
        for r in range(runs):
            run = start_run(session=session, goal=f"batch {r}", actor=AGENT)
            for n in range(per_run):
                arguments = http_arguments(target.base, "naive")
                item = f"{r}-{n}"
                arguments["url"] = f"{target.base}/naive/items/{item}"
                arguments["verify"]["url"] = f"{target.base}/items/{item}"
                operations.append(
                    propose(
                        f"op-{item}",
                        target=run,
                        action="http.request",
                        arguments=arguments,
                        rollback_kind="out_of_band",
                        risk="low",
                    )
                )
        return operations

    return make


def assert_each_executed_once(operations: list[Operation], target) -> None:
    ids = [op.pk for op in operations]
    ended = Operation.objects.filter(pk__in=ids)
    not_committed = list(ended.exclude(status="committed").values_list("status", "status_reason"))
    assert not_committed == []
    assert [target.applied[op.idempotency_key] for op in operations] == [1] * len(operations)
    claims = Checkpoint.objects.filter(operation_id__in=ids, to_status="in_flight")
    assert claims.filter(event="operation.status").count() == len(operations)
    assert not claims.filter(event="operation.lease_taken_over").exists()


def idle_worker() -> subprocess.Popen:
    """A worker whose idle interval is a minute, once it has looked for work, found
    none, and waits: only a wake-up makes it look again sooner."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.telling_worker", "--name", "w0", "--idle-seconds", "60"],
        cwd=ROOT,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    waits(worker)
    return worker


def waits(worker: subprocess.Popen) -> None:
    """Return once ``worker`` (``tests.telling_worker``) begins to wait for work."""
    told(worker, "WAITING")


def carried_out_soon(operation: Operation, worker: subprocess.Popen) -> None:
    """Carried out long before the worker's next look (a minute away)."""

    def committed() -> bool:
        return Operation.objects.get(pk=operation.pk).status == Operation.Status.COMMITTED

    wait_until(committed, 20, "the approval carried out before the worker's next look", worker)


def test_an_idle_worker_carries_out_an_approval_at_once_not_at_its_next_look(auto_approved):
    """On PostgreSQL the worker LISTENs for the approval, on SQLite it sees the commit."""
    worker = idle_worker()
    try:
        [operation] = auto_approved(1, 1)
        carried_out_soon(operation, worker)
    finally:
        worker.send_signal(signal.SIGTERM)
    wait_all([worker], timeout=10)  # SIGTERM ends even a minute's wait at once.


def test_an_idle_worker_outlives_the_loss_of_its_database_connection(auto_approved):
    """A restart or a failover of PostgreSQL drops the connection an idle worker LISTENs
    on: it connects again and carries out the next approval as promptly."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has no server to drop a connection")
    worker = idle_worker()
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            assert cursor.fetchone()[0] >= 1
        waits(worker)  # Again, on a new connection.
        [operation] = auto_approved(1, 1)
        carried_out_soon(operation, worker)
    finally:
        worker.send_signal(signal.SIGTERM)
    wait_all([worker], timeout=10)


@pytest.fixture
def in_flight_together(target):
    """``in_flight_together(n)``: the target holds each of the first ``n`` calls it
    receives until all ``n`` are in flight at once, so that ``n`` workers race from
    the start; returns the calls that met (all ``n``, unless the deadline passed)."""
    met: list[str] = []

    def hold(parties: int) -> list[str]:
        together = threading.Barrier(parties, timeout=DEADLINE_SECONDS)
        arrivals = itertools.count()
        put = target.RequestHandlerClass.do_PUT

        def held_put(handler) -> None:
            if next(arrivals) < parties:
                with suppress(threading.BrokenBarrierError):
                    together.wait()
                    met.append(handler.path)
            put(handler)

        target.RequestHandlerClass.do_PUT = held_put
        return met

    return hold


# A call held by the target until the other workers' calls arrive must not time out.
PATIENT = {"OVERSIGHT_HTTP_TIMEOUT_SECONDS": "120", "OVERSIGHT_HTTP_DEADLINE_SECONDS": "120"}


def test_two_workers_racing_execute_each_operation_once(auto_approved, target, in_flight_together):
    operations = auto_approved(runs=4, per_run=5)
    met = in_flight_together(2)
    wait_all(start_workers(2, "--once", **PATIENT))
    assert len(met) == 2, "the two workers never had a call in flight at the same time"
    assert_each_executed_once(operations, target)


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="many workers on many machines is PostgreSQL's job"
)
def test_eight_workers_drain_500_operations_without_a_double_execution(
    auto_approved, target, in_flight_together
):
    operations = auto_approved(runs=50, per_run=10)
    met = in_flight_together(8)
    wait_all(start_workers(8, "--once", **PATIENT))
    assert len(met) == 8, "the eight workers never had a call in flight at the same time"
    assert_each_executed_once(operations, target)


def test_sigterm_lets_the_operation_in_hand_finish(approved, target):
    arguments = http_arguments(target.base, "slow", compensate=True)
    op = approved("http", **arguments)
    (worker,) = start_workers(1)
    started = Operation.objects.filter(pk=op.pk, status="in_flight", intent__isnull=False)
    wait_until(started.exists, message="the worker starting the operation", process=worker)
    worker.send_signal(signal.SIGTERM)  # The target takes two seconds to answer.
    wait_all([worker], timeout=30)

    op.refresh_from_db()
    assert op.status == "committed"
    assert target.applied[op.idempotency_key] == 1


@pytest.fixture
def another_workers_turn():
    """The turn to claim on SQLite, held here as another worker would hold it."""
    if connection.vendor != "sqlite":
        pytest.skip("PostgreSQL writes concurrently: its workers take no turns")
    with open(f"{connection.settings_dict['NAME']}-claims.lock", "a") as turn:
        fcntl.flock(turn, fcntl.LOCK_EX)
        yield turn


def test_sqlite_workers_take_turns_to_claim(approved, another_workers_turn):
    op = approved("ledger")
    (worker,) = start_workers(1, "--once")
    waits_for_its_turn(worker)

    assert worker.poll() is None  # Waiting for its turn,
    assert Operation.objects.get(pk=op.pk).status == "approved"  # with nothing claimed.
    fcntl.flock(another_workers_turn, fcntl.LOCK_UN)
    wait_all([worker], timeout=30)
    assert Operation.objects.get(pk=op.pk).status == "committed"


def test_a_worker_waiting_for_its_turn_still_stops_on_sigterm(another_workers_turn):
    (worker,) = start_workers(1)
    waits_for_its_turn(worker)

    worker.send_signal(signal.SIGTERM)
    wait_all([worker], timeout=10)  # Not the busy timeout's 20 s.


def waits_for_its_turn(worker: subprocess.Popen) -> None:
    """Return once ``worker`` has opened the turn's file to take its turn: held here,
    it waits there (for at most SQLite's busy timeout)."""
    turn = os.path.realpath(turn_file())

    def opened() -> bool:
        with suppress(FileNotFoundError):  # A descriptor closed while listed.
            fds = Path(f"/proc/{worker.pid}/fd").iterdir()
            return any(os.path.realpath(fd) == turn for fd in fds)
        return False

    wait_until(opened, message="the worker's attempt to take its turn", process=worker)
