"""``/metrics``, for Prometheus: only with OVERSIGHT_METRICS_TOKEN as a bearer token, no
cookie; the numbers read from the database at each scrape (queues, decisions, ended
operations, durations, lease takeovers, alerts and deliveries, workers), for every
project, in a fixed number of queries however much data there is."""

import time

import pytest

from runs.models import Decision, Operation
from tests.helpers import decide_on, drained

pytestmark = pytest.mark.django_db


# --- durations ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["ledger", "http"])
def test_the_worker_records_how_long_effect_and_verification_took(approved, kind):
    op = approved(kind)
    assert (op.execution_ms, op.verification_ms) == (None, None)

    started = time.monotonic()
    op = drained(op)
    elapsed_ms = (time.monotonic() - started) * 1000

    assert op.status == Operation.Status.COMMITTED
    assert op.execution_ms is not None and op.verification_ms is not None
    assert op.execution_ms + op.verification_ms <= elapsed_ms + 1


def test_an_operation_that_never_ran_has_no_durations(propose, reviewer):
    op = propose()
    decide_on(op, reviewer, Decision.Kind.REJECT, comment="Not this month")
    assert (op.execution_ms, op.verification_ms) == (None, None)
