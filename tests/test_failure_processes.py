"""The engine's failure semantics (#10) with real processes: a worker paused past its
lease (SIGSTOP, then SIGCONT) fires nothing when it wakes; a worker whose clock runs
ahead leaves live leases alone; two runs moving money in opposite directions at once
both commit; an email that may have left is never recorded as "not executed"; and
the invariants see two epochs firing where a repeat could apply twice."""

import signal
import subprocess
import sys
from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection

from runs.actions.files import workspace_of
from runs.actors import Actor
from runs.canonical import sha256_hex
from runs.clock import db_now
from runs.engine.boundaries import INTENT
from runs.engine.claims import claim_next
from runs.models import Account, Alert, LedgerEntry, Operation
from runs.services.runs import cancel_run, start_run
from tests.conftest import AGENT
from tests.helpers import decide_on
from tests.processes import (
    CHILD_LEASE_LAPSED,
    ROOT,
    child_env,
    crash_worker_at,
    manage,
    spawn,
    take_over,
    wait_for_line,
    wait_until,
)
from tests.telling_worker import told

pytestmark = pytest.mark.django_db(transaction=True)


def pause_worker_at(boundary: str, *options: str):
    worker = spawn("worker-pause-at", boundary, *options)
    wait_for_line(worker, "PAUSED")
    return worker


def wake(worker) -> None:
    worker.send_signal(signal.SIGCONT)
    assert worker.wait(timeout=60) == 0, worker.stderr.read()


def started(module: str, *args: str) -> subprocess.Popen:
    """``python -m MODULE ARGS`` (a worker of the tests') against this test's database."""
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# --- A worker paused past its lease ----------------------------------------------------


def test_a_paused_file_writer_does_not_overwrite_a_later_write(approved, project):
    """The paused worker wakes after another worker committed its write and a later
    operation changed the file again: it must not write its (now stale) version."""
    path = workspace_of(project) / "notes/today.md"
    op = approved("file")
    paused = pause_worker_at(INTENT)
    take_over()
    later = approved("file", content="a later version\n", expected_sha256=sha256_hex(b"hello\n"))
    done = manage("runworker", "--once")
    assert done.returncode == 0, done.stderr

    wake(paused)

    assert path.read_text() == "a later version\n"
    assert Operation.objects.get(pk=op.pk).status == "committed"
    assert Operation.objects.get(pk=later.pk).status == "committed"


def test_a_paused_caller_of_a_target_that_does_not_deduplicate_never_calls_twice(approved, target):
    """Whether the paused worker fired cannot be seen, and firing again could apply
    the effect twice: the takeover does not fire, a person decides, and the paused
    worker does not fire when it wakes either."""
    op = approved("http-naive")
    paused = pause_worker_at(INTENT)
    take_over()
    wake(paused)

    op.refresh_from_db()
    assert op.status == "alerted"
    assert target.applied[op.idempotency_key] == 0
    assert "nothing was rolled back" in Alert.objects.get(operation=op).summary


def test_a_paused_caller_of_a_deduplicating_target_is_fired_once(approved, target, deduplicating):
    op = approved("http")
    paused = pause_worker_at(INTENT)
    take_over()
    wake(paused)

    op.refresh_from_db()
    assert op.status == "committed"
    assert target.applied[op.idempotency_key] == 1
    epochs = [
        state["attempt"]["epoch"]
        for state in op.checkpoints.filter(event="operation.intent").values_list("state", flat=True)
    ]
    assert epochs == [1, 2]  # Two epochs fired; the target's key made it once.


def test_a_paused_transfer_is_made_once(approved, accounts):
    """Step by step, the paused worker's lease lapses and another worker takes over."""
    op = approved("ledger")
    paused = pause_worker_at(INTENT, "--step-by-step")
    take_over()
    wake(paused)

    op.refresh_from_db()
    assert op.status == "committed"
    assert op.checkpoints.filter(event="operation.lease_taken_over").count() == 1
    assert LedgerEntry.objects.count() == 1
    assert dict(Account.objects.values_list("name", "balance")) == {
        "A": Decimal("4900.00"),
        "B": Decimal("100.00"),
    }


def test_a_transfer_paused_in_its_claim_cannot_be_taken_over_and_is_made_once(approved, accounts):
    """Paused past its lease inside the one transaction that claims and makes the
    transfer, the worker still holds the run: nothing of its claim is committed, and
    another worker passes the run by (PostgreSQL) or waits (SQLite: one writer at a
    time). The paused worker makes the transfer when it wakes, once."""
    op = approved("ledger")
    paused = pause_worker_at(INTENT)
    # Its lease, never committed, ends within a second of its pause, in the clock the
    # claims read.
    lapsed = db_now() + timedelta(seconds=CHILD_LEASE_LAPSED)
    wait_until(lambda: db_now() > lapsed, message="the paused worker's lease running out")
    other = started("tests.telling_worker", "--once", "--lease-seconds", "5")
    told(other, "STEP")  # Its look for work began while the paused worker holds the run.
    if connection.vendor == "postgresql":
        assert other.wait(timeout=60) == 0, other.communicate()[1]
        op.refresh_from_db()
        assert (op.status, op.fencing_epoch) == ("approved", 0)
    else:
        assert other.poll() is None  # Still waiting for the database.
    wake(paused)
    _, errors = other.communicate(timeout=60)
    assert other.returncode == 0, errors

    op.refresh_from_db()
    assert (op.status, op.lease_owner, op.fencing_epoch) == ("committed", "paused", 1)
    assert not op.checkpoints.filter(event="operation.lease_taken_over").exists()
    assert LedgerEntry.objects.count() == 1
    assert dict(Account.objects.values_list("name", "balance")) == {
        "A": Decimal("4900.00"),
        "B": Decimal("100.00"),
    }


def test_the_invariants_see_two_epochs_fire_where_the_target_does_not_deduplicate(
    approved, target, deduplicating, settings
):
    """Declared deduplicating, a takeover fires again; had the declaration been wrong,
    that second firing could have applied twice, and check_invariants says so."""
    op = approved("http")
    crash_worker_at(INTENT)
    take_over()
    settings.OVERSIGHT_HTTP_DEDUPLICATING_HOSTS = []
    out, err = StringIO(), StringIO()

    with pytest.raises(SystemExit):
        call_command("check_invariants", stdout=out, stderr=err)

    assert (
        f"operation {op.pk} (http.request) fired under epochs 1, 2, against a target that "
        "does not deduplicate" in err.getvalue()
    )


# --- Clocks, deadlocks, and effects that may have happened -----------------------------


def test_a_worker_whose_clock_runs_ahead_leaves_a_live_lease_alone(approved, accounts):
    op = approved("ledger")
    claim_next(worker="A", lease=timedelta(seconds=60))

    ahead = spawn("worker-clock-ahead", "120")
    assert ahead.wait(timeout=60) == 0, ahead.stderr.read()

    op.refresh_from_db()
    assert (op.status, op.lease_owner, op.fencing_epoch) == ("in_flight", "A", 1)
    assert not op.checkpoints.filter(event="operation.lease_taken_over").exists()
    assert not LedgerEntry.objects.exists()


def test_opposite_transfers_in_two_runs_at_once_both_commit(
    run, session, propose, reviewer, accounts, tmp_path
):
    """A → B and B → A at the same moment: on PostgreSQL, locking one account then the
    other deadlocked, and the victim was "compensated" with money that never moved.
    There, the two workers meet inside their transfers' transactions, each past its
    first lock before either takes its second, as in that deadlock."""
    Account.objects.filter(name="B").update(balance=Decimal("5000.00"))
    refund = start_run(session=session, goal="Refund", actor=AGENT)
    there = propose("there", arguments={"from": "A", "to": "B", "amount": "200.00"})
    back = propose("back", target=refund, arguments={"from": "B", "to": "A", "amount": "100.00"})
    decide_on(there, reviewer)
    decide_on(back, reviewer)

    workers = [started("tests.rendezvous_ledger_worker", str(tmp_path)) for _ in range(2)]
    said = []
    for worker in workers:
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err
        said.append(out)
    if connection.vendor == "postgresql":
        assert said == ["MET\n", "MET\n"]

    statuses = Operation.objects.filter(pk__in=[there.pk, back.pk]).values_list("status", flat=True)
    assert set(statuses) == {"committed"}
    assert dict(Account.objects.values_list("name", "balance")) == {
        "A": Decimal("4900.00"),
        "B": Decimal("5100.00"),
    }
    assert LedgerEntry.objects.count() == 2


@pytest.mark.parametrize("then", ["the run is cancelled", "the precondition fails"])
def test_an_email_that_may_have_left_is_never_recorded_as_not_executed(
    approved, run, admin_user, tmp_path, then
):
    """The worker handed the email over and died before recording it. Whatever happens
    next, "not executed" would be a lie: a person must find out."""
    op = approved("email")
    sent = tmp_path / "sent.log"
    dying = spawn("worker-dies-after-sending", str(sent))
    assert dying.wait(timeout=60) == -signal.SIGKILL
    assert sent.read_text() == "Report\n"
    env = {}
    if then == "the run is cancelled":
        cancel_run(run=run, actor=Actor.of_user(admin_user), reason="stop everything")
    else:
        env["OVERSIGHT_EMAIL_ALLOWED_DOMAINS"] = "elsewhere.example"
    take_over(**env)

    op.refresh_from_db()
    assert op.status == "alerted"
    assert "cannot tell whether the effect happened" in op.status_reason
    assert sent.read_text() == "Report\n"  # Not sent again.


def test_a_cancel_after_a_takeover_is_not_called_unfired_where_the_call_may_still_land(
    approved, run, admin_user, target, deduplicating
):
    """The dead worker recorded its intent; its request, if sent, may still be on its way
    to the target, so "cancelled before the effect fired" would be a guess."""
    op = approved("http")
    crash_worker_at(INTENT)
    cancel_run(run=run, actor=Actor.of_user(admin_user), reason="stop everything")
    take_over()

    op.refresh_from_db()
    assert op.status == "alerted"
    assert "the earlier attempt's effect may still land" in op.status_reason


def test_an_interrupted_compensation_is_not_sent_twice_to_a_target_that_does_not_deduplicate(
    approved, target
):
    """The compensating call (marking the garbled item withdrawn) was answered, then its
    worker died. The target shows neither the state from before nor the effect: sending
    it again would apply the compensation twice."""
    withdraw = {"method": "PUT", "url": f"{target.base}/naive/items/x", "body": {"gone": True}}
    op = approved("http-rigged", compensate=withdraw)
    dying = spawn("worker-dies-after-compensating")
    assert dying.wait(timeout=60) == -signal.SIGKILL
    take_over()

    op.refresh_from_db()
    assert op.status == "alerted"
    assert target.applied[f"{op.idempotency_key}:compensate"] == 1
    assert "may already have taken the rollback step" in op.status_reason
