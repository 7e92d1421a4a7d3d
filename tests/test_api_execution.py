"""Operations the agent executes itself: claimed through the API after approval, with a
lease, a fencing epoch and the operation's idempotency key; then intent, outcome and
verification, or the rollback plan / an alert."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from runs.models import Alert, Operation
from runs.services.runs import cancel_run
from tests.api_helpers import agent_proposal, problem
from tests.conftest import AGENT
from tests.helpers import decide_on, stored

pytest_plugins = ["tests.api_helpers"]


@pytest.fixture
def push(api, run, reviewer) -> Operation:
    """An approved ``git.push``: an action Oversight does not know, so the agent runs it."""
    op_id = api.propose(run.pk, agent_proposal()).json()["id"]
    op = Operation.objects.get(pk=op_id)
    assert op.executor == "agent"
    decide_on(op, reviewer)
    assert op.status == "approved"
    return op


def step(api, op: Operation, name: str, body: dict | None = None):
    return api.post(f"/operations/{op.pk}/{name}", body or {})


def claimed(api, op: Operation, **body) -> dict:
    response = step(api, op, "claim", body)
    assert response.status_code == 200, response.content
    return response.json()


def status_of(op: Operation) -> str:
    op.refresh_from_db()
    return op.status


# --- claiming ------------------------------------------------------------------------------


def test_a_claim_takes_the_operation_with_epoch_one_and_its_key(api, push):
    before = timezone.now()
    body = claimed(api, push, executor="laptop-7", lease_seconds=120)
    assert body["operation"] == push.pk
    assert body["epoch"] == 1
    assert body["idempotency_key"] == push.idempotency_key
    assert body["arguments"] == {"remote": "origin", "branch": "main"}
    assert body["intent"] is None
    push.refresh_from_db()
    assert (push.status, push.lease_owner, push.fencing_epoch) == ("in_flight", "laptop-7", 1)
    assert timedelta(seconds=115) < push.lease_expires_at - before < timedelta(seconds=125)
    lease = api.get(f"/operations/{push.pk}").json()["lease"]
    assert (lease["owner"], lease["epoch"]) == ("laptop-7", 1)


def test_the_executor_defaults_to_the_token_name(api, push):
    claimed(api, push)
    push.refresh_from_db()
    assert push.lease_owner == "test-agent"


def test_a_second_claim_while_the_lease_holds_is_a_conflict(api, push):
    claimed(api, push)
    before = stored()
    assert problem(step(api, push, "claim"), 409)["error"] == "stale_version"
    assert stored() == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"lease_seconds": 0}, "lease_seconds"),
        ({"lease_seconds": 3601}, "lease_seconds"),
        ({"executor": "e" * 201}, "executor"),
    ],
)
def test_claim_fields_are_checked(api, push, body, field):
    problem(step(api, push, "claim", body), 422, field)
    assert status_of(push) == "approved"


def test_a_server_executed_operation_cannot_be_claimed(api, propose, reviewer):
    op = propose("call-1")  # ledger.transfer: Oversight's workers execute it.
    decide_on(op, reviewer)
    problem(step(api, op, "claim"), 422, "operation")
    assert status_of(op) == "approved"


def test_an_operation_awaiting_its_decision_cannot_be_claimed(api, run):
    op = Operation.objects.get(pk=api.propose(run.pk, agent_proposal()).json()["id"])
    assert problem(step(api, op, "claim"), 409)["error"] == "stale_version"
    assert status_of(op) == "proposed"


def test_a_rejected_operation_cannot_be_claimed(api, run, reviewer):
    op = Operation.objects.get(pk=api.propose(run.pk, agent_proposal()).json()["id"])
    decide_on(op, reviewer, "reject", comment="not today")
    problem(step(api, op, "claim"), 409)
    assert status_of(op) == "rejected"


def test_an_operation_of_a_cancelled_run_cannot_be_claimed(api, run, push):
    cancel_run(run=run, actor=AGENT, reason="stop")
    problem(step(api, push, "claim"), 409)
    assert status_of(push) == "cancelled"


def test_a_lapsed_approval_cannot_be_claimed(api, push):
    Operation.objects.filter(pk=push.pk).update(
        approval_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert "expired" in problem(step(api, push, "claim"), 409)["detail"]
    assert status_of(push) == "expired"


# --- intent and report --------------------------------------------------------------------------


def test_intent_is_recorded_before_the_effect(api, push):
    claimed(api, push)
    response = step(api, push, "intent", {"epoch": 1, "snapshot": {"remote_head": "abc123"}})
    assert response.status_code == 200
    assert response.json()["status"] == "in_flight"
    push.refresh_from_db()
    assert push.intent == {"remote_head": "abc123"}


def test_a_verified_report_commits(api, push):
    claimed(api, push)
    step(api, push, "intent", {"epoch": 1, "snapshot": {"remote_head": "abc123"}})
    response = step(api, push, "report", {"epoch": 1, "verified": True, "output": {"head": "def"}})
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "committed"
    assert body["result"] == {"verified": True, "output": {"head": "def"}, "error": ""}
    push.refresh_from_db()
    assert (push.status, push.lease_expires_at) == ("committed", None)
    assert push.run.checkpoints.filter(operation=push, to_status="committed").exists()


def test_an_unverified_report_is_a_verification_failure(api, push):
    claimed(api, push)
    response = step(api, push, "report", {"epoch": 1, "verified": False, "error": "head moved"})
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["status_reason"]) == (
        "verify_failed",
        "head moved",
    )
    assert status_of(push) == "verify_failed"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"epoch": 1}, "verified"),
        ({"epoch": 1, "verified": "probably"}, "verified"),
        ({"verified": True}, "epoch"),
        ({"epoch": 1, "verified": True, "error": "e" * 4001}, "error"),
    ],
)
def test_report_fields_are_checked(api, push, body, field):
    claimed(api, push)
    before = stored()
    problem(step(api, push, "report", body), 422, field)
    assert stored() == before
    assert status_of(push) == "in_flight"


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("intent", {"epoch": 2, "snapshot": {}}),
        ("intent", {"epoch": 0, "snapshot": {}}),
        ("report", {"epoch": 2, "verified": True}),
        ("report", {"epoch": 0, "verified": True}),
    ],
)
def test_a_step_with_the_wrong_epoch_is_a_conflict(api, push, name, body):
    claimed(api, push)
    before = stored()
    assert problem(step(api, push, name, body), 409)["error"] == "stale_version"
    assert stored() == before


@pytest.mark.parametrize("name", ["intent", "report"])
def test_a_step_before_the_claim_is_a_conflict(api, push, name):
    problem(step(api, push, name, {"epoch": 0, "verified": True}), 409)
    assert status_of(push) == "approved"


def test_a_committed_operation_takes_no_second_report(api, push):
    claimed(api, push)
    step(api, push, "report", {"epoch": 1, "verified": True})
    problem(step(api, push, "report", {"epoch": 1, "verified": False}), 409)
    assert status_of(push) == "committed"


def test_a_committed_operation_cannot_be_claimed_again(api, push):
    claimed(api, push)
    step(api, push, "report", {"epoch": 1, "verified": True})
    problem(step(api, push, "claim"), 409)


# --- rollback and alerts ----------------------------------------------------------------------


@pytest.fixture
def unverified(api, push) -> Operation:
    claimed(api, push)
    step(api, push, "report", {"epoch": 1, "verified": False, "error": "not there"})
    return push


@pytest.mark.parametrize("outcome", ["compensated", "rolled_back"])
def test_a_verification_failure_is_undone(api, unverified, outcome):
    response = step(api, unverified, "rollback", {"epoch": 1, "outcome": outcome, "detail": "ok"})
    assert response.status_code == 200
    assert response.json()["status"] == outcome
    unverified.refresh_from_db()
    assert (unverified.status, unverified.lease_expires_at) == (outcome, None)
    assert not Alert.objects.exists()


def test_an_alert_halts_the_run_for_reconciliation(api, run, unverified):
    detail = "the push half-landed; please check the remote"
    response = step(api, unverified, "rollback", {"epoch": 1, "outcome": "alert", "detail": detail})
    assert response.status_code == 200
    assert response.json()["status"] == "alerted"
    alert = Alert.objects.get()
    assert (alert.operation, alert.run, alert.summary, alert.status) == (
        unverified,
        run,
        detail,
        "open",
    )
    assert alert.state_left["arguments"] == {"remote": "origin", "branch": "main"}
    body = api.get(f"/runs/{run.pk}").json()
    assert (body["status"], body["reason"]) == ("waiting", "reconciliation")
    assert str(alert.pk) in body["unblock"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"epoch": 1}, "outcome"),
        ({"epoch": 1, "outcome": "forgotten"}, "outcome"),
        ({"outcome": "compensated"}, "epoch"),
    ],
)
def test_rollback_fields_are_checked(api, unverified, body, field):
    problem(step(api, unverified, "rollback", body), 422, field)
    assert status_of(unverified) == "verify_failed"


def test_a_rollback_with_the_wrong_epoch_is_a_conflict(api, unverified):
    problem(step(api, unverified, "rollback", {"epoch": 2, "outcome": "compensated"}), 409)
    assert status_of(unverified) == "verify_failed"


def test_a_rollback_needs_a_verification_failure_first(api, push):
    claimed(api, push)
    problem(step(api, push, "rollback", {"epoch": 1, "outcome": "compensated"}), 409)
    assert status_of(push) == "in_flight"
    assert not Alert.objects.exists()


# --- an expired lease --------------------------------------------------------------------------


def test_after_the_lease_expires_a_new_claim_takes_over(api, push):
    claimed(api, push, executor="first", lease_seconds=1)
    step(api, push, "intent", {"epoch": 1, "snapshot": {"remote_head": "abc123"}})
    assert problem(step(api, push, "claim"), 409)["error"] == "stale_version"
    time.sleep(1.1)

    takeover = claimed(api, push, executor="second")
    assert takeover["epoch"] == 2
    assert takeover["intent"] == {"remote_head": "abc123"}
    assert takeover["idempotency_key"] == push.idempotency_key
    assert push.checkpoints.filter(event="operation.lease_taken_over").count() == 1

    late = step(api, push, "report", {"epoch": 1, "verified": True})
    assert problem(late, 409)["error"] == "stale_version"
    assert status_of(push) == "in_flight"
    assert step(api, push, "report", {"epoch": 2, "verified": True}).status_code == 200
    assert status_of(push) == "committed"
