"""The crash matrix (seed 003): a worker process is killed with SIGKILL at each
boundary of the protocol, a fresh worker process resumes after the lease expires, and
the effect has fired exactly once — for the file, ledger and HTTP actions. The naive
orders are shown failing the same way we pass."""

import signal

import pytest

from runs.actions.files import workspace_of
from runs.canonical import sha256_hex
from runs.engine.boundaries import CLAIMED, EXECUTED, INTENT, ROLLING_BACK, VERIFIED
from runs.models import Account, Checkpoint, LedgerEntry, Operation
from tests.processes import crash_worker_at, spawn, take_over

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE_RECORD = [CLAIMED, INTENT, EXECUTED, VERIFIED]


def fired(kind: str, op: Operation, target) -> int:
    """How many times the effect happened, read from the target itself."""
    if kind == "ledger":
        return LedgerEntry.objects.filter(idempotency_key=op.idempotency_key).count()
    if kind == "http":
        return target.applied[op.idempotency_key]
    raise AssertionError(kind)


def claims(op: Operation) -> int:
    return Checkpoint.objects.filter(
        operation=op, to_status="in_flight", event="operation.status"
    ).count()


@pytest.mark.parametrize("boundary", BEFORE_RECORD)
@pytest.mark.parametrize("kind", ["ledger step by step", "http"])
def test_killed_worker_is_resumed_and_the_effect_fires_once(
    approved, target, deduplicating, kind, boundary
):
    kind, _, step_by_step = kind.partition(" ")
    op = approved(kind)
    crash_worker_at(boundary, step_by_step=bool(step_by_step))
    take_over()

    op.refresh_from_db()
    assert op.status == "committed"
    assert fired(kind, op, target) == 1
    assert claims(op) == 1  # One claim; the resumption is a recorded lease takeover.
    assert op.checkpoints.filter(event="operation.lease_taken_over").count() == 1


@pytest.mark.parametrize("boundary", BEFORE_RECORD)
def test_a_transfer_killed_anywhere_leaves_nothing_and_is_made_once_by_the_next_worker(
    approved, boundary
):
    """An effect inside the database is carried out in the transaction that claims it:
    killed at any boundary, the worker leaves no claim, no intent and no entry behind,
    and the next worker makes the transfer as a first attempt."""
    op = approved("ledger")
    before = list(op.checkpoints.values_list("seq", "event"))
    crash_worker_at(boundary)

    op.refresh_from_db()
    assert (op.status, op.fencing_epoch, op.intent) == ("approved", 0, None)
    assert list(op.checkpoints.values_list("seq", "event")) == before
    assert fired("ledger", op, None) == 0
    take_over()

    op.refresh_from_db()
    assert (op.status, op.fencing_epoch) == ("committed", 1)
    assert fired("ledger", op, None) == 1
    assert claims(op) == 1
    assert not op.checkpoints.filter(event="operation.lease_taken_over").exists()


@pytest.mark.parametrize("boundary", [EXECUTED, VERIFIED])
def test_a_target_that_does_not_deduplicate_is_verified_on_resume(approved, target, boundary):
    op = approved("http-naive")
    crash_worker_at(boundary)
    take_over()

    op.refresh_from_db()
    assert op.status == "committed"
    assert target.applied[op.idempotency_key] == 1


def test_a_target_that_does_not_deduplicate_is_not_fired_again_after_an_intent(approved, target):
    """The dead worker recorded its intent; whether it fired cannot be seen, and firing
    again could apply the effect twice: at most once, and a person decides."""
    op = approved("http-naive")
    crash_worker_at(INTENT)
    take_over()

    op.refresh_from_db()
    assert op.status == "alerted"
    assert target.applied[op.idempotency_key] == 0
    assert "does not deduplicate" in op.alerts.get().summary


@pytest.mark.parametrize("boundary", BEFORE_RECORD)
def test_killed_file_write_is_resumed_and_written_once(approved, project, boundary):
    op = approved("file")
    path = workspace_of(project) / "notes/today.md"
    crash_worker_at(boundary)
    inode = path.stat().st_ino if path.exists() else None
    take_over()

    op.refresh_from_db()
    assert op.status == "committed"
    assert path.read_text() == "hello\n"
    if boundary in (EXECUTED, VERIFIED):
        assert path.stat().st_ino == inode  # Verified on resume, not written again.


def test_killed_during_in_band_rollback_restores_the_file_once(approved, project, monkeypatch):
    """The worker cannot re-read its write and gives up at once; killed as it starts the
    undo, it leaves the rollback to the next worker, which restores the file."""
    path = workspace_of(project) / "notes/today.md"
    path.parent.mkdir(parents=True)
    path.write_text("previous\n")
    op = approved("file", expected_sha256=sha256_hex(b"previous\n"))
    monkeypatch.setenv("OVERSIGHT_MAX_ATTEMPTS", "1")
    crash_worker_at(ROLLING_BACK, "file")
    monkeypatch.delenv("OVERSIGHT_MAX_ATTEMPTS")
    take_over()

    op.refresh_from_db()
    assert op.status == "rolled_back"
    assert path.read_text() == "previous\n"


def test_killed_during_compensation_compensates_once(approved, accounts):
    op = approved("ledger")
    crash_worker_at(ROLLING_BACK, "ledger")
    take_over()

    op.refresh_from_db()
    assert op.status == "compensated"
    keys = [op.idempotency_key, f"{op.idempotency_key}:compensate"]
    assert LedgerEntry.objects.filter(idempotency_key__in=keys).count() == 2
    assert Account.objects.get(name="B").balance == 0  # 100 in, 100 back.


def test_killed_during_http_compensation_compensates_once(approved, target):
    op = approved("http-rigged")
    crash_worker_at(ROLLING_BACK)
    take_over()

    op.refresh_from_db()
    assert op.status == "compensated"
    assert target.applied[f"{op.idempotency_key}:compensate"] == 1
    assert target.applied[op.idempotency_key] == 1  # Once, garbled: hence the compensation.


def test_mark_done_first_records_an_effect_that_never_fired(approved, target):
    op = approved("http-naive")
    child = spawn("naive-worker", "mark-done-first", str(op.pk))
    assert child.wait(timeout=60) == -signal.SIGKILL

    op.refresh_from_db()
    assert op.status == "committed"
    assert target.applied[op.idempotency_key] == 0


def test_fire_then_mark_without_verifying_first_fires_twice(approved, target):
    op = approved("http-naive")
    crashed = spawn("naive-worker", "fire-then-mark", str(op.pk), "--crash")
    assert crashed.wait(timeout=60) == -signal.SIGKILL
    rerun = spawn("naive-worker", "fire-then-mark", str(op.pk))
    assert rerun.wait(timeout=60) == 0, rerun.stderr.read()

    assert target.applied[op.idempotency_key] == 2


def test_our_order_fires_once_against_a_target_that_ignores_keys(approved, target):
    op = approved("http-naive")
    crash_worker_at(EXECUTED)
    take_over()

    op.refresh_from_db()
    assert op.status == "committed"
    assert target.applied[op.idempotency_key] == 1
