"""The pipeline's cost in queries, step by step (#17): an auto-approved ledger transfer
proposed, claimed and carried out. Exact counts: a change that adds a query to the hot
path changes a number here, on purpose or not."""

from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.engine import claims
from runs.engine.claims import claim, claim_next
from runs.engine.executor import Execution
from runs.engine.worker import Worker
from runs.models import Account, ApprovalPolicy, Operation
from runs.services.decisions import decide
from runs.services.runs import start_run
from tests.conftest import AGENT

LEASE = Worker().lease
# propose (auto-approved by policy); a worker's step: claim and carry out (intent,
# transfer, verify, commit) in the claim's transaction; a busy worker's next step is
# that, nothing more. The same step by step (the way an effect outside the database
# goes, and the way back when the one transaction does not go as usual): claim, then
# carry out. The same on SQLite and PostgreSQL, but for the approval's notification to
# idle workers there. A claim that carries the effect out in its own transaction first
# commits its attempt's count in a transaction of its own (a worker that dies in there
# leaves it counted): the row read unless held, its update, and the savepoint that
# transaction is in a test.
EXPECTED = {"propose": 21, "at once": 37, "busy step": 37, "claim": 12, "carry out": 34}
# Four transfers claimed together (where writers take turns anyway): 33 statements each
# instead of 37, and two commits for the four instead of eight.
EXPECTED["4 together"] = 132
# A reviewer's approval of an operation that awaits one: the decision, the operation's
# transition in the decision's transaction, the run back to the queue, both written
# through the run the decision locked.
EXPECTED["approve"] = 26  # and the project's webhooks that want "decided"
if connection.vendor == "postgresql":
    EXPECTED["propose"] += 1
    EXPECTED["approve"] += 1
    # Each checkpoint's feed entry is numbered by the feed's reader there, not by its
    # writer: one statement less per checkpoint written.
    for step, checkpoints in {
        "propose": 2,
        "approve": 2,
        "at once": 3,
        "busy step": 3,
        "4 together": 12,
        "claim": 1,
        "carry out": 2,
    }.items():
        EXPECTED[step] -= checkpoints


@pytest.fixture
def transfer(project, propose):
    ApprovalPolicy.objects.create(project=project, action="ledger.transfer", approvals_required=0)
    Account.objects.create(project=project, name="A", balance=Decimal("1000.00"))
    Account.objects.create(project=project, name="B", balance=Decimal("0.00"))

    def proposed(call_id: str, **kwargs) -> Operation:
        arguments = {"from": "A", "to": "B", "amount": "1.00"}
        return propose(call_id, arguments=arguments, risk="low", **kwargs)

    proposed("warm-up")  # The run's first operation writes more; count a later one.
    Worker("warm-up").drain()
    return proposed


def counted(step) -> tuple[int, object]:
    with CaptureQueriesContext(connection) as queries:
        result = step()
    return len(queries.captured_queries), result


def test_an_auto_approved_transfer_is_proposed_then_carried_out_in_one_transaction(transfer):
    n, operation = counted(lambda: transfer("t1"))
    assert (n, operation.status) == (EXPECTED["propose"], Operation.Status.APPROVED)
    worker = Worker("w")
    n, claimed = counted(lambda: claim_next(worker="w", lease=LEASE, then=worker._at_once))
    assert (n, claimed.pk, worker.at_once) == (EXPECTED["at once"], operation.pk, True)
    operation.refresh_from_db()
    assert operation.status == Operation.Status.COMMITTED
    events = operation.checkpoints.order_by("seq").values_list("event", "to_status")
    assert list(events)[-3:] == [
        ("operation.status", "in_flight"),
        ("operation.intent", "in_flight"),
        ("operation.status", "committed"),
    ]


def test_transfers_claimed_together_share_their_commit_and_their_count(
    transfer, session, monkeypatch
):
    """Four transfers on four runs, taken together as a worker on SQLite does: one
    transaction counts their attempts, one claims and carries them all out."""
    monkeypatch.setattr(claims, "TOGETHER_SECONDS", 60)  # A slow machine cuts no claim.
    for i in range(4):
        transfer(f"t{i}", target=start_run(session=session, goal=f"Goal {i}", actor=AGENT))
    worker = Worker("w")
    n, claimed = counted(
        lambda: claim(worker="w", lease=LEASE, then=worker._at_once, most=claims.TOGETHER)
    )
    assert (n, len(claimed)) == (EXPECTED["4 together"], 4)
    assert set(worker.done_in_claim.values()) == {True}


def test_each_step_by_step_of_a_transfer_costs_a_fixed_number_of_queries(transfer):
    operation = transfer("t1")
    n, claimed = counted(lambda: claim_next(worker="w", lease=LEASE))
    assert (n, claimed.pk) == (EXPECTED["claim"], operation.pk)
    n, _ = counted(lambda: Execution(claimed, "w", LEASE).run())
    assert n == EXPECTED["carry out"]
    operation.refresh_from_db()
    assert operation.status == Operation.Status.COMMITTED


def test_a_busy_worker_looks_for_what_is_due_once_a_second_not_before_each_operation(
    transfer,
):
    worker = Worker("busy")
    transfer("t1")
    transfer("t2")
    assert worker.step()  # Looks for what is due, then carries out t1.
    n, did_work = counted(worker.step)  # t2, right after: nothing else looked for.
    assert (n, did_work) == (EXPECTED["busy step"], True)
    assert Operation.objects.filter(status=Operation.Status.COMMITTED).count() == 3


def test_an_idle_worker_woken_by_work_claims_it_before_looking_for_what_is_due(transfer):
    """It looked while idle, less than a second ago: an approval is carried out at once."""
    worker = Worker("idle")
    assert not worker.step()  # Nothing to claim: it looks for what is due, and idles.
    transfer("t1")
    n, did_work = counted(worker.step)
    assert (n, did_work) == (EXPECTED["busy step"], True)


def test_a_reviewers_approval_costs_a_fixed_number_of_queries(propose, reviewer):
    operation = propose("t1")
    n, _ = counted(
        lambda: decide(
            operation=operation,
            reviewer=reviewer,
            kind="approve",
            arguments_hash=operation.arguments_hash,
        )
    )
    operation.refresh_from_db()
    assert (n, operation.status) == (EXPECTED["approve"], Operation.Status.APPROVED)
    assert operation.run.status == "queued"
