"""A folder's lock is bounded by its holder's lease (#31): a ``file.write`` worker stopped
while it holds the lock holds the folder up only until its lease lapses, and then can
change nothing there; a killed one holds nobody up; the housekeeping sweep never removes
what a live writer staged. With real worker processes where a process is stopped."""

import signal
import threading
import time
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from runs.actions.base import Context
from runs.actions.files import FolderBusy, FolderLock, clear_leftovers, folder_lock, workspace_of
from runs.canonical import sha256_hex
from runs.demo.agent import write_as_colleague
from runs.engine.claims import claim_next
from runs.engine.lease import Lease, LeaseLost
from runs.errors import InvalidInput
from runs.models import Operation
from tests.helpers import invariants_hold
from tests.processes import manage, spawn, wait_for_line

LEASE = timedelta(seconds=60)
# How long a worker waits for a folder's lock before it tries later: longer than any
# lease the stopped workers below hold, so a write that waited it out was held up.
WAIT_SECONDS = "30"


@pytest.fixture
def writer_in_lock(approved):
    """``writer_in_lock(how, lease_seconds)``: an approved write of notes/first.md, and
    the worker process carrying it out, which stops (SIGSTOP) or dies (SIGKILL) right
    after it confirmed its lease inside the folder's lock; one still stopped when the
    test ends is killed."""
    workers = []

    def start(how: str, lease_seconds: int):
        first = approved("file", path="notes/first.md", content="first\n")
        workers.append(spawn("worker-stop-in-lock", how, str(lease_seconds)))
        wait_for_line(workers[-1], "IN LOCK")
        return first, workers[-1]

    yield start
    for worker in workers:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def another_write_goes_ahead(approved, folder: Path) -> None:
    """A write of another file in ``folder``, drained by another worker process, commits
    without waiting a whole wait out for the folder's lock."""
    second = approved("file", path="notes/second.md", content="second\n")
    started = time.monotonic()
    done = manage(
        "runworker", "--once", "--lease-seconds", "5", OVERSIGHT_LEASE_SECONDS=WAIT_SECONDS
    )
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < float(WAIT_SECONDS)
    assert status(second) == "committed"
    assert (folder / "second.md").read_text() == "second\n"


def status(op: Operation) -> str:
    return Operation.objects.get(pk=op.pk).status


def leftovers(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir() if path.name.startswith(".incoming-"))


@pytest.mark.django_db(transaction=True)
def test_a_writer_stopped_in_the_folders_lock_holds_it_only_until_its_lease_lapses(
    approved, project, writer_in_lock
):
    first, stopped = writer_in_lock("SIGSTOP", 3)
    folder = workspace_of(project) / "notes"

    another_write_goes_ahead(approved, folder)

    # The stopped worker's operation was taken over and verified absent, then written.
    assert status(first) == "committed"
    written = (folder / "first.md").stat()

    stopped.send_signal(signal.SIGCONT)
    assert stopped.wait(timeout=60) == 0, stopped.stderr.read()

    # Woken after its confirm, it finds its place in the lock gone: it writes nothing.
    after = (folder / "first.md").stat()
    assert (after.st_ino, after.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
    assert (folder / "first.md").read_text() == "first\n"
    checkpoints = Operation.objects.get(pk=first.pk).checkpoints
    assert checkpoints.filter(event="operation.lease_taken_over").count() == 1
    assert checkpoints.filter(to_status="committed").count() == 1
    assert leftovers(folder) == []
    assert invariants_hold()


@pytest.mark.django_db(transaction=True)
def test_a_writer_killed_in_the_folders_lock_holds_nobody_up(approved, project, writer_in_lock):
    first, killed = writer_in_lock("SIGKILL", 60)
    assert killed.wait(timeout=60) == -signal.SIGKILL
    folder = workspace_of(project) / "notes"

    # Its lease still holds, but nothing holds its lock's flock: it can land nothing more.
    another_write_goes_ahead(approved, folder)

    assert status(first) == "in_flight"
    assert not (folder / "first.md").exists()
    assert leftovers(folder) == []


def holding(stack: ExitStack, op: Operation, **options) -> FolderLock:
    """``op``'s worker holding the lock of the folder of ``op``'s file."""
    folder = workspace_of(op.project) / "notes"
    folder.mkdir(parents=True, exist_ok=True)
    ctx = Context(operation=op, lease=Lease(op, LEASE))
    return stack.enter_context(folder_lock(folder, ctx, **options))


@pytest.mark.django_db(transaction=True)
def test_a_holder_is_waited_for_while_its_lease_holds_and_taken_over_when_it_does_not(
    approved, project
):
    target = workspace_of(project) / "notes/today.md"
    op = approved("file")
    with ExitStack() as stack:
        late = holding(stack, claim_next(worker="A", lease=LEASE), staged=b"late\n")

        with pytest.raises(FolderBusy), ExitStack() as waiting:
            holding(waiting, op, wait=False)
        taken_over = claim_next(worker="B", lease=LEASE, now=timezone.now() + LEASE)
        with ExitStack() as next_holder:
            holding(next_holder, taken_over, wait=False)

        with pytest.raises(LeaseLost):
            late.replace(target)
    assert not target.exists()
    assert leftovers(target.parent) == []


@pytest.mark.django_db(transaction=True)
def test_a_holder_taken_over_cannot_remove_the_file(approved, project):
    target = workspace_of(project) / "notes/today.md"
    target.parent.mkdir(parents=True)
    target.write_text("hello\n")
    op = approved("file", content="hello again\n", expected_sha256=sha256_hex(b"hello\n"))
    with ExitStack() as stack:
        late = holding(stack, claim_next(worker="A", lease=LEASE))
        taken_over = claim_next(worker="B", lease=LEASE, now=timezone.now() + LEASE)
        with ExitStack() as next_holder:
            holding(next_holder, taken_over, wait=False)

        with pytest.raises(LeaseLost):
            late.remove(target)
    assert target.read_text() == "hello\n"
    assert status(op) == "in_flight"


def test_the_sweep_removes_a_dead_writers_staging_folder_never_a_live_ones(project):
    folder = workspace_of(project) / "notes"
    dead = folder / ".incoming-1-1-dead" / "1-1-dead"
    dead.mkdir(parents=True)
    (dead / "content").write_bytes(b"half a fi")
    live = FolderLock(folder, None)
    live.stage(b"staged\n")
    try:
        assert clear_leftovers() == 1
        assert leftovers(folder) == [live.staging.name]
        assert (live.staging / live.name / "content").read_bytes() == b"staged\n"
    finally:
        live.release()
    assert leftovers(folder) == []


@pytest.mark.django_db(transaction=True)
def test_a_writer_never_waits_for_the_housekeeping_sweep(approved, project):
    folder = workspace_of(project) / "notes"
    folder.mkdir(parents=True)
    leftover = folder / ".incoming-k1ll3d"
    approved("file")
    op = claim_next(worker="A", lease=LEASE)
    with ExitStack() as stack:
        sweep = stack.enter_context(folder_lock(folder, wait=False, sweep=True))
        with ExitStack() as writer:
            holding(writer, op, wait=False)
        leftover.write_bytes(b"half a fi")

        with pytest.raises(FolderBusy):  # It gave way: it removes nothing more.
            sweep.remove(leftover)
    assert leftover.exists()


def test_a_path_through_a_folder_named_like_oversights_own_is_refused(propose):
    arguments = {"path": "notes/.incoming-lock/x.md", "content": "x", "expected_sha256": None}

    with pytest.raises(InvalidInput, match="path"):
        propose("never", action="file.write", arguments=arguments, rollback_kind="in_band")
    assert not Operation.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_colleague_writing_beside_the_sweep_loses_no_write(project):
    """The demo's colleague writes the shared plan without the folder's lock, while
    workers sweep the workspace: the sweep never takes a write from under it."""
    plan = workspace_of(project) / "shared" / "plan.md"
    done = threading.Event()

    def sweep():
        while not done.is_set():
            clear_leftovers()

    sweeper = threading.Thread(target=sweep)
    sweeper.start()
    try:
        for n in range(300):
            write_as_colleague(plan, f"- note {n}\n".encode())
    finally:
        done.set()
        sweeper.join()
    assert plan.read_bytes() == b"- note 299\n"
