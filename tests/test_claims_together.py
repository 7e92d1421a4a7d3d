"""Claims taken together: where writers take turns anyway (SQLite), a worker claims and
carries out several first attempts at effects inside the database in one transaction.
Each keeps its own claim (run lock, version, epoch, checkpoints); one that does not go
as usual goes step by step without taking the others with it; the transaction is
bounded; and a poison operation claimed with others costs them nothing."""

import signal
from datetime import timedelta
from decimal import Decimal

import pytest

from runs.engine import claims
from runs.engine.claims import claim
from runs.engine.worker import Worker
from runs.models import Account, LedgerEntry, Operation
from runs.services.runs import start_run
from tests.conftest import AGENT
from tests.helpers import decide_on
from tests.processes import spawn, take_over

pytestmark = pytest.mark.django_db(transaction=True)
LEASE = timedelta(seconds=60)


@pytest.fixture(autouse=True)
def unhurried(monkeypatch):
    """The bound has a test of its own; elsewhere here, a slow machine must not cut a
    claim taken together short."""
    monkeypatch.setattr(claims, "TOGETHER_SECONDS", 60)


@pytest.fixture
def transfers(propose, reviewer, session, accounts):
    """``transfers(n, **arguments)``: n approved transfers of 100.00 from A to B, each
    on a run of its own (calls t0, t1, ...)."""

    def make(n: int, **arguments) -> list[Operation]:
        ops = []
        for i in range(n):
            run = start_run(session=session, goal=f"Transfer {i}", actor=AGENT)
            args = {"from": "A", "to": "B", "amount": "100.00", **arguments}
            op = propose(f"t{i}", target=run, arguments=args)
            decide_on(op, reviewer)
            ops.append(op)
        return ops

    return make


def claimed_together(worker: Worker, most: int = claims.TOGETHER) -> list[Operation]:
    worker.done_in_claim = {}
    return claim(worker=worker.name, lease=LEASE, then=worker._at_once, most=most)


def balance(name: str) -> Decimal:
    return Account.objects.get(name=name).balance


def test_first_attempts_on_different_runs_are_claimed_and_carried_out_together(transfers):
    ops = transfers(5)
    worker = Worker("w")

    claimed = claimed_together(worker)

    assert [op.pk for op in claimed] == [op.pk for op in ops]
    assert worker.done_in_claim == {op.pk: True for op in ops}
    assert balance("B") == Decimal("500.00")
    for op in Operation.objects.filter(pk__in=[op.pk for op in ops]):
        events = op.checkpoints.order_by("seq").values_list("event", "to_status")
        assert list(events)[-3:] == [
            ("operation.status", "in_flight"),
            ("operation.intent", "in_flight"),
            ("operation.status", "committed"),
        ]
        assert (op.status, op.attempts, op.fencing_epoch) == ("committed", 1, 1)
        assert LedgerEntry.objects.filter(idempotency_key=op.idempotency_key).count() == 1


def test_one_operation_per_run_and_only_first_attempts_go_together(
    transfers, propose, reviewer, run
):
    first, other = transfers(2)
    second_of_first = propose("t0-again", target=first.run, arguments=first.arguments)
    decide_on(second_of_first, reviewer)
    Operation.objects.filter(pk=other.pk).update(attempts=1)  # Claimed before, and died.
    worker = Worker("w")

    assert [op.pk for op in claimed_together(worker)] == [first.pk]  # Alone: nobody to join.
    assert [op.pk for op in claimed_together(worker)] == [other.pk]
    assert [op.pk for op in claimed_together(worker)] == [second_of_first.pk]
    assert balance("B") == Decimal("300.00")


def test_one_that_does_not_go_as_usual_goes_step_by_step_and_the_others_commit(transfers):
    ops = transfers(2) + transfers(1, require_balance_above="100000.00") + transfers(2)
    refused = ops[2]
    worker = Worker("w")

    claimed = claimed_together(worker)

    assert len(claimed) == 5
    assert worker.done_in_claim[refused.pk] is False  # Rolled back to its own claim.
    refused.refresh_from_db()
    assert (refused.status, refused.attempts) == ("in_flight", 1)  # Claimed, not carried out.
    worker.carry_out(next(op for op in claimed if op.pk == refused.pk))
    refused.refresh_from_db()
    assert refused.status == "precondition_failed"
    assert balance("B") == Decimal("400.00")
    committed = Operation.objects.filter(status="committed", call_id__startswith="t")
    assert committed.count() == 4


def test_the_transaction_starts_no_operation_after_its_bound(transfers, monkeypatch):
    ops = transfers(4)
    monkeypatch.setattr(claims, "TOGETHER_SECONDS", 0)

    claimed = claimed_together(Worker("w"))

    assert [op.pk for op in claimed] == [ops[0].pk]
    left = Operation.objects.filter(pk__in=[op.pk for op in ops[1:]])
    assert {(op.status, op.attempts) for op in left} == {("approved", 0)}  # Not counted.


def test_a_worker_killed_by_a_poison_transfer_claimed_with_others_costs_them_nothing(
    transfers,
):
    """The first worker claims all six together (as many as its bound lets it) and dies
    at t2's effect: each counted once, nothing committed. Counted once, they go alone
    from then on, so only t2 dies again, until it runs out of attempts; the others
    commit once each, their budget untouched. Taken together again, each death would
    count for all six, and all would give up with t2."""
    ops = transfers(6)
    for _ in range(4):
        child = spawn("worker-poisoned-by", "t2")
        if child.wait(timeout=60) == 0:
            break
        assert child.returncode == -signal.SIGKILL, child.stderr.read()
    take_over(OVERSIGHT_MAX_ATTEMPTS="3")

    by_call = {op.call_id: op for op in Operation.objects.filter(pk__in=[op.pk for op in ops])}
    poison = by_call.pop("t2")
    assert (poison.status, poison.status_reason) == (
        "failed",
        "gave up after 3 attempts that ended their worker",
    )
    assert {op.status for op in by_call.values()} == {"committed"}
    assert max(op.attempts for op in by_call.values()) <= 2
    for op in by_call.values():
        assert LedgerEntry.objects.filter(idempotency_key=op.idempotency_key).count() == 1
    assert balance("B") == Decimal("500.00")
