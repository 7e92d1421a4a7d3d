"""The lease heartbeat, as docs/concepts/operations.md promises it: "a heartbeat renews
the lease every third of it while the worker works". A real worker process runs an
action that outlasts its lease several times over (the target holds the write until the
test lets it answer): the lease is renewed again and again before it lapses, another
worker looking for work meanwhile takes nothing over, and the effect happens once."""

import statistics
import threading
from datetime import timedelta
from itertools import pairwise

import pytest

from runs.clock import db_now
from runs.engine.claims import TAKEN_OVER
from runs.models import Checkpoint, Operation
from tests.processes import manage, manage_started, wait_until

pytestmark = pytest.mark.django_db(transaction=True)
LEASE = timedelta(seconds=6)
RENEWALS = 3


@pytest.fixture
def held_target(target):
    """The target, holding each write until ``release`` is set (``arrived`` says one
    came in): an action as slow as the test needs, with no sleep."""
    arrived, release = threading.Event(), threading.Event()

    class Held(target.RequestHandlerClass):
        def do_PUT(self) -> None:
            arrived.set()
            release.wait(timeout=300)
            super().do_PUT()

    target.RequestHandlerClass = Held
    target.arrived, target.release = arrived, release
    yield target
    release.set()


def renewals_past(operation: Operation, expiry, worker) -> list:
    """The lease's expiries seen while the worker holds it, until the lease it had at
    ``expiry`` has lapsed in the database's clock and it was renewed ``RENEWALS`` times."""
    seen = [expiry]

    def renewed_enough() -> bool:
        now = db_now()
        row = Operation.objects.get(pk=operation.pk)
        assert (row.status, row.fencing_epoch) == (Operation.Status.IN_FLIGHT, 1)
        assert row.lease_expires_at > now, "the lease lapsed while its worker held it"
        if row.lease_expires_at != seen[-1]:
            seen.append(row.lease_expires_at)
        return len(seen) > RENEWALS and now > expiry

    wait_until(renewed_enough, 120, f"{RENEWALS} renewals past the lease", worker)
    return seen


def test_the_lease_heartbeat_renews_every_third_of_the_lease_while_an_action_outlasts_it(
    approved, held_target
):
    operation = approved("http")
    worker = manage_started(
        "runworker", "--once", "--name", "slow", "--lease-seconds", str(LEASE.total_seconds()),
        OVERSIGHT_HTTP_TIMEOUT_SECONDS="300", OVERSIGHT_HTTP_DEADLINE_SECONDS="300",
    )  # fmt: skip
    try:
        assert held_target.arrived.wait(timeout=60), "the worker never fired the effect"
        # The effect is firing: from here only the heartbeat renews the lease.
        fired = Operation.objects.get(pk=operation.pk).lease_expires_at
        expiries = renewals_past(operation, fired, worker)
        # The lease it had when the effect fired has lapsed: without the heartbeat,
        # another worker would take the operation over now.
        rival = manage("runworker", "--once", "--name", "rival")
        assert rival.returncode == 0, rival.stderr
        held = Operation.objects.get(pk=operation.pk)
        assert (held.status, held.fencing_epoch) == (Operation.Status.IN_FLIGHT, 1)
        assert held.lease_expires_at > db_now()
    finally:
        held_target.release.set()
    _, err = worker.communicate(timeout=120)
    assert worker.returncode == 0, err

    # Each renewal extended the lease before it lapsed, about a third of it after the last.
    renewed_at = [expiry - LEASE for expiry in expiries[1:]]
    assert all(at < before for at, before in zip(renewed_at, expiries, strict=False))
    gaps = [(b - a).total_seconds() for a, b in pairwise(renewed_at)]
    assert statistics.median(gaps) < LEASE.total_seconds() / 2, gaps
    operation.refresh_from_db()
    assert (operation.status, operation.fencing_epoch) == (Operation.Status.COMMITTED, 1)
    assert held_target.applied[operation.idempotency_key] == 1
    assert not Checkpoint.objects.filter(operation=operation, event=TAKEN_OVER).exists()
