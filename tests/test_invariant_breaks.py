"""Two of ``check_invariants``' promises (docs/operating/commands.md), each broken in the
database as it could be behind the app's back: "no idempotency key was taken for
execution twice" and "every waiting run has a reason". The command names the object
and exits 1."""

from contextlib import contextmanager

import pytest
from django.db import connection

from runs.engine.worker import Worker
from runs.models import Checkpoint, Operation, Run
from tests.helpers import invariants_hold
from tests.test_check_invariants import approve_behind_the_apps_back, check_invariants, sql


def only_violation(expected: str) -> None:
    """The command fails, naming ``expected`` on a line of its own, and nothing else."""
    code, out, err = check_invariants()
    assert code == 1
    assert "all invariants hold" not in out
    assert err.splitlines() == [f"violation: {expected}", "1 invariant violation(s)"]


def test_check_invariants_reports_an_idempotency_key_executed_twice(approved):
    """An executed transfer set back to approved behind the app's back (a restore mixing
    two moments, a hand-made fix): a worker takes its key for execution a second time,
    through the app, so every checkpoint chain stays unbroken."""
    operation = approved("ledger")
    Worker(name="w1").step()
    assert Operation.objects.get(pk=operation.pk).status == Operation.Status.COMMITTED
    assert invariants_hold()
    approve_behind_the_apps_back(pk=operation.pk)

    Worker(name="w2").step()

    claims = Checkpoint.objects.filter(
        operation=operation, event="operation.status", to_status=Operation.Status.IN_FLIGHT
    )
    assert claims.count() == 2
    only_violation(f"idempotency key {operation.idempotency_key} was taken for execution 2 times")


@contextmanager
def without_the_waiting_reason_constraint():
    """The schema refuses a waiting run without a reason (``run_waiting_has_reason``);
    a database restored from elsewhere or changed by hand may not have it. Lifted for
    this connection only (PostgreSQL: inside the test's transaction, rolled back)."""
    if connection.vendor == "sqlite":
        sql("PRAGMA ignore_check_constraints = ON")
        try:
            yield
        finally:
            sql("PRAGMA ignore_check_constraints = OFF")
    else:
        sql("SET CONSTRAINTS ALL IMMEDIATE")  # No deferred check may be pending for DDL.
        sql("ALTER TABLE runs_run DROP CONSTRAINT run_waiting_has_reason")
        yield


@pytest.mark.parametrize(
    "change",
    ["reason = ''", "unblock = ''"],
    ids=["without a reason", "without what unblocks it"],
)
def test_check_invariants_reports_a_waiting_run_without_a_reason(run, propose, change):
    propose("call-1")
    run.refresh_from_db()
    assert (run.status, run.reason) == (Run.Status.WAITING, Run.Reason.APPROVAL)
    assert invariants_hold()

    with without_the_waiting_reason_constraint():
        sql(f"UPDATE runs_run SET {change} WHERE id = %s", run.pk)

    only_violation(f"run {run.pk} is waiting without a reason and what unblocks it")
