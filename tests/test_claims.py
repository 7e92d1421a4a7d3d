"""Claims: work in any run another transaction does not hold is found, however many
operations the held run has; and every claim is an attempt counted durably, so an
operation whose attempts kill their worker runs out of them instead of being taken over
forever."""

import threading
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction

from runs.engine.boundaries import CLAIMED, INTENT
from runs.engine.claims import CANDIDATES, _count_attempts, _uncount_attempts, claim_next
from runs.models import LedgerEntry, Operation, Run
from runs.services.runs import start_run
from tests.conftest import AGENT
from tests.helpers import decide_on
from tests.overlap import DEADLINE_SECONDS
from tests.processes import crash_worker_at, leases_lapsed, take_over

pytestmark = pytest.mark.django_db(transaction=True)
LEASE = timedelta(seconds=60)


def approve_many(propose, reviewer, run: Run, n: int) -> list[Operation]:
    ops = []
    for i in range(n):
        op = propose(f"busy-{run.pk}-{i}", target=run)
        decide_on(op, reviewer)
        ops.append(op)
    return ops


class HeldRun:
    """Another connection holding ``run``'s row lock in an open transaction (a worker
    carrying out an effect in its claim's transaction, or paused in one)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.locked, self.release = threading.Event(), threading.Event()
        self.held_until_told = False
        self.thread = threading.Thread(target=self._hold)

    def _hold(self) -> None:
        try:
            with transaction.atomic():
                list(Run.objects.select_for_update().filter(pk=self.run.pk))
                self.locked.set()
                self.held_until_told = self.release.wait(DEADLINE_SECONDS)
        finally:
            connections.close_all()

    def __enter__(self) -> "HeldRun":
        self.thread.start()
        assert self.locked.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.thread.join()
        # Let go by its deadline instead, it would have let what ran inside the block
        # through only once it stopped holding the run: the test would prove nothing.
        assert self.held_until_told, "what ran while the run was held waited for it"


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite holds the whole database, not a run"
)
def test_a_run_held_with_many_approved_operations_does_not_hide_another_runs_work(
    propose, reviewer, run, session, accounts
):
    approve_many(propose, reviewer, run, CANDIDATES + 5)
    other_run = start_run(session=session, goal="Another goal", actor=AGENT)
    (waiting,) = approve_many(propose, reviewer, other_run, 1)

    with HeldRun(run):
        claimed = claim_next(worker="w", lease=LEASE)

    assert claimed is not None and claimed.pk == waiting.pk
    assert Operation.objects.filter(run=run, status="approved").count() == CANDIDATES + 5


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite holds the whole database, not a run"
)
def test_nothing_is_claimed_and_no_attempt_counted_while_the_only_run_is_held(
    propose, reviewer, run, accounts
):
    ops = approve_many(propose, reviewer, run, 3)
    with HeldRun(run):
        assert claim_next(worker="w", lease=LEASE, then=lambda op, run: None) is None
    assert {op.attempts for op in Operation.objects.filter(pk__in=[o.pk for o in ops])} == {0}


def test_a_transfer_that_kills_its_worker_in_the_claims_transaction_is_counted(approved):
    op = approved("ledger")
    crash_worker_at(INTENT)
    op.refresh_from_db()
    assert (op.status, op.attempts, op.intent) == ("approved", 1, None)


def crash_repeatedly(times: int, boundary: str, *, step_by_step: bool = False) -> None:
    """``times`` worker processes in turn, each killed at ``boundary`` (each once the
    last one's lease lapsed, when it left a claim behind)."""
    for _ in range(times):
        crash_worker_at(boundary, step_by_step=step_by_step)
        leases_lapsed()


@pytest.mark.parametrize(
    "boundary, step_by_step",
    [(INTENT, False), (CLAIMED, True)],
    ids=["in the claim's transaction", "after the claim committed"],
)
def test_an_operation_whose_every_attempt_kills_its_worker_ends_failed(
    approved, boundary, step_by_step
):
    """Three attempts die before the intent; the fourth claim gives up at once and says
    why, and no transfer is made."""
    op = approved("ledger")
    crash_repeatedly(3, boundary, step_by_step=step_by_step)
    take_over(OVERSIGHT_MAX_ATTEMPTS="3")

    op.refresh_from_db()
    assert (op.status, op.attempts) == ("failed", 4)
    assert op.status_reason == "gave up after 3 attempts that ended their worker"
    assert not LedgerEntry.objects.exists()
    told = [m.payload.get("text", "") for m in op.run.messages.all()]
    assert any(f"Operation {op.pk} (ledger.transfer) was not executed" in t for t in told)


def test_a_call_whose_attempts_kill_their_worker_after_the_intent_goes_to_its_rollback_plan(
    approved, target, deduplicating
):
    """Past its intent the effect may have happened: out of attempts, the operation is
    uncertain and its rollback plan decides; the call itself was never made again."""
    op = approved("http")
    crash_repeatedly(3, INTENT)
    take_over(OVERSIGHT_MAX_ATTEMPTS="3")

    op.refresh_from_db()
    assert op.status in {"compensated", "alerted"}
    assert op.checkpoints.filter(
        to_status="verify_failed", reason__startswith="gave up after 3 attempts"
    ).exists()
    assert target.applied[op.idempotency_key] == 0


def test_a_count_taken_back_leaves_the_count_of_another_workers_claim(approved):
    """Worker A counts an attempt on a transfer, worker C (reading after A) counts its
    own, A's claim does not happen and A takes its count back: C's stays, whatever the
    order. Taking back 'the value A wrote' once left C's claim counted twice, and under
    eight busy workers operations gave up after attempts never made."""
    op = approved("ledger")
    assert _count_attempts([op.pk], seen=0)  # A
    assert not _count_attempts([op.pk], seen=0)  # B read before A counted: leaves it.
    assert _count_attempts([op.pk], seen=1)  # C
    _uncount_attempts([op.pk])  # A
    op.refresh_from_db()
    assert op.attempts == 1


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite holds the whole database, not a row"
)
def test_a_count_taken_back_waits_for_the_claim_holding_the_operation(approved):
    """A counts, C counts after it and its claim holds the operation's row, A's claim
    does not happen: A's count is taken back once C's claim lets go. Passed by instead
    (SKIP LOCKED), it stayed for good: under eight busy workers an operation gave up
    "after 3 attempts that ended their worker", never attempted."""
    op = approved("ledger")
    assert _count_attempts([op.pk], seen=0)  # A
    assert _count_attempts([op.pk], seen=1)  # C
    held, release = threading.Event(), threading.Event()

    def claim_of_c():
        try:
            with transaction.atomic():
                list(Operation.objects.select_for_update().filter(pk=op.pk))
                held.set()
                release.wait(DEADLINE_SECONDS)
        finally:
            connections.close_all()

    def take_back_of_a():
        try:
            _uncount_attempts([op.pk])
        finally:
            connections.close_all()

    c, a = threading.Thread(target=claim_of_c), threading.Thread(target=take_back_of_a)
    c.start()
    assert held.wait(10)
    a.start()
    a.join(0.5)
    waited = a.is_alive()
    release.set()
    c.join()
    a.join()
    op.refresh_from_db()
    assert (waited, op.attempts) == (True, 1)
