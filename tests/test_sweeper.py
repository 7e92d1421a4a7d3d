"""The sweep for agent-executed operations whose agent went away: after the lease has
lapsed for the grace period, an effect that may have happened is alerted on (the run
halts for a person), a missing rollback report too, and an operation that never
recorded its intent ends failed. A worker sweeps on every step."""

from datetime import timedelta

import pytest

from runs.clock import db_now
from runs.engine.sweeper import sweep_agent_operations
from runs.engine.worker import Worker
from runs.models import Alert, Operation, Run
from runs.services.runs import cancel_run
from tests.api_helpers import agent_proposal
from tests.conftest import AGENT
from tests.helpers import decide_on, project_settings, stored

pytest_plugins = ["tests.api_helpers"]

GRACE = 300


@pytest.fixture(autouse=True)
def grace(settings):
    settings.OVERSIGHT_AGENT_GRACE_SECONDS = GRACE


@pytest.fixture
def push(api, run, reviewer) -> Operation:
    """An approved agent-executed operation, claimed at epoch 1."""
    op = Operation.objects.get(pk=api.propose(run.pk, agent_proposal()).json()["id"])
    decide_on(op, reviewer)
    assert api.post(f"/operations/{op.pk}/claim", {}).status_code == 200
    return op


def intended(api, op: Operation) -> None:
    response = api.post(f"/operations/{op.pk}/intent", {"epoch": 1, "snapshot": {"head": "abc"}})
    assert response.status_code == 200, response.content


def reported_uncertain(api, op: Operation) -> None:
    intended(api, op)
    response = api.post(f"/operations/{op.pk}/report", {"epoch": 1, "effect": "uncertain"})
    assert response.status_code == 200, response.content


def lapsed(op: Operation, seconds: int) -> None:
    """The operation's lease lapsed ``seconds`` ago, in the database's clock."""
    Operation.objects.filter(pk=op.pk).update(
        lease_expires_at=db_now() - timedelta(seconds=seconds)
    )


def halted(run: Run) -> bool:
    run.refresh_from_db()
    return (run.status, run.reason) == ("waiting", "reconciliation")


def test_an_intent_whose_lease_lapsed_is_alerted_and_halts_the_run(api, run, push):
    intended(api, push)
    lapsed(push, GRACE + 1)

    assert sweep_agent_operations() == 1
    push.refresh_from_db()
    assert push.status == "alerted"
    assert push.lease_expires_at is None
    summary = "the agent's lease lapsed after its intent: the effect may have happened"
    alert = Alert.objects.get()
    assert (alert.operation, alert.summary, alert.status) == (push, summary, "open")
    assert alert.state_left["intent"] == {"head": "abc"}
    assert alert.state_left["lease"]["epoch"] == 1
    assert halted(run)
    steps = push.checkpoints.filter(event="operation.status").order_by("seq")
    assert [(c.to_status, c.actor_kind, c.actor_label) for c in steps][-2:] == [
        ("verify_failed", "policy", "agent lease lapsed"),
        ("alerted", "policy", "agent lease lapsed"),
    ]


def test_a_missing_rollback_report_is_alerted(api, run, push):
    reported_uncertain(api, push)
    lapsed(push, GRACE + 1)

    assert sweep_agent_operations() == 1
    push.refresh_from_db()
    assert push.status == "alerted"
    assert Alert.objects.get().summary == "the agent did not report its rollback"
    assert halted(run)


def test_an_operation_without_an_intent_ends_failed(api, run, push):
    lapsed(push, GRACE + 1)

    assert sweep_agent_operations() == 1
    push.refresh_from_db()
    assert (push.status, push.lease_expires_at) == ("failed", None)
    assert push.result["effect"] == "absent"
    assert not Alert.objects.exists()
    assert not halted(run)
    assert api.post(f"/runs/{run.pk}/finish", {"status": "completed"}).status_code == 200


def test_nothing_is_swept_within_the_grace(api, push):
    intended(api, push)
    lapsed(push, GRACE - 30)  # The agent may still come back, wait out its lease, verify.
    before = stored()
    assert sweep_agent_operations() == 0
    assert stored() == before


def test_an_agent_that_came_back_is_left_alone(api, push):
    intended(api, push)
    lapsed(push, GRACE + 1)
    takeover = api.post(f"/operations/{push.pk}/claim", {"executor": "restarted"})
    assert takeover.status_code == 200
    assert sweep_agent_operations() == 0
    push.refresh_from_db()
    assert (push.status, push.fencing_epoch) == ("in_flight", 2)


def test_operations_oversight_executes_are_left_to_the_workers_claims(propose, reviewer):
    op = propose("call-1")  # ledger.transfer: a server-executed action.
    decide_on(op, reviewer)
    Operation.objects.filter(pk=op.pk).update(
        status="in_flight", intent={}, lease_expires_at=db_now() - timedelta(seconds=GRACE + 1)
    )
    assert sweep_agent_operations() == 0
    assert Operation.objects.get(pk=op.pk).status == "in_flight"


def test_an_effect_that_may_have_happened_in_a_cancelled_run_is_alerted(api, run, push):
    intended(api, push)
    cancel_run(run=run, actor=AGENT, reason="stop")
    lapsed(push, GRACE + 1)

    assert sweep_agent_operations() == 1
    assert Operation.objects.get(pk=push.pk).status == "alerted"
    assert Alert.objects.get().operation_id == push.pk
    run.refresh_from_db()
    assert run.status == "cancelled"


def test_every_abandoned_operation_is_settled(api, run, reviewer, push):
    intended(api, push)
    other = Operation.objects.get(pk=api.propose(run.pk, agent_proposal("push-2")).json()["id"])
    decide_on(other, reviewer)
    assert api.post(f"/operations/{other.pk}/claim", {}).status_code == 200
    lapsed(push, GRACE + 1)
    lapsed(other, GRACE + 1)

    assert sweep_agent_operations() == 2
    assert sorted(Operation.objects.values_list("status", flat=True)) == ["alerted", "failed"]
    assert sweep_agent_operations() == 0


def test_a_worker_sweeps_on_every_step(api, run, push):
    intended(api, push)
    lapsed(push, GRACE + 1)

    assert Worker(name="w1").step() is True
    assert Operation.objects.get(pk=push.pk).status == "alerted"
    assert halted(run)


def test_the_grace_is_a_setting_of_five_minutes_by_default(monkeypatch):
    monkeypatch.delenv("OVERSIGHT_AGENT_GRACE_SECONDS", raising=False)
    assert project_settings(monkeypatch)["OVERSIGHT_AGENT_GRACE_SECONDS"] == 300
