"""Operations the agent executes itself: claimed through the API after approval, with a
lease, a fencing epoch and the operation's idempotency key; then intent, outcome and
verification, or the rollback plan / an alert."""

from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from runs.clock import db_now
from runs.engine.worker import Worker
from runs.models import Alert, Operation, Run
from runs.services.runs import cancel_run
from tests.api_helpers import agent_proposal, problem
from tests.conftest import AGENT
from tests.helpers import decide_on, stored
from tests.processes import leases_lapsed

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


def intended(api, op: Operation, epoch: int = 1) -> None:
    response = step(api, op, "intent", {"epoch": epoch, "snapshot": {"remote_head": "abc123"}})
    assert response.status_code == 200, response.content


def lapse(op: Operation, seconds: int = 1) -> None:
    """Move the operation's lease ``seconds`` into the past, in the database's clock."""
    Operation.objects.filter(pk=op.pk).update(
        lease_expires_at=db_now() - timedelta(seconds=seconds)
    )


@pytest.fixture
def halt(api, run, reviewer):
    """``halt()``: another agent operation of the run ends in an alert, which halts the
    run for reconciliation."""

    def halt_run() -> Alert:
        other = Operation.objects.get(pk=api.propose(run.pk, agent_proposal("push-2")).json()["id"])
        decide_on(other, reviewer)
        epoch = claimed(api, other)["epoch"]
        intended(api, other, epoch)
        step(api, other, "report", {"epoch": epoch, "effect": "uncertain"})
        step(api, other, "rollback", {"epoch": epoch, "outcome": "alert", "detail": "look"})
        run.refresh_from_db()
        assert (run.status, run.reason) == ("waiting", "reconciliation")
        return Alert.objects.get(operation=other)

    return halt_run


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
    assert problem(step(api, push, "claim"), 409)["error"] == "run_closed"
    assert status_of(push) == "cancelled"


def test_a_cancelled_run_takes_no_takeover_of_an_operation_in_flight(api, run, push):
    claimed(api, push)
    intended(api, push)
    cancel_run(run=run, actor=AGENT, reason="stop")
    lapse(push)
    before = stored()
    body = problem(step(api, push, "claim", {"executor": "second"}), 409)
    assert (body["error"], body["detail"]) == ("run_closed", f"run {run.pk} is cancelled")
    assert stored() == before
    push.refresh_from_db()
    assert (push.status, push.fencing_epoch) == ("in_flight", 1)


def test_a_run_halted_for_reconciliation_takes_no_claim(api, push, halt):
    halt()
    before = stored()
    assert problem(step(api, push, "claim"), 409)["error"] == "run_not_accepting"
    assert stored() == before
    assert status_of(push) == "approved"


def test_a_run_halted_for_reconciliation_takes_no_takeover(api, push, halt):
    claimed(api, push)
    intended(api, push)
    halt()
    lapse(push)
    assert problem(step(api, push, "claim"), 409)["error"] == "run_not_accepting"
    push.refresh_from_db()
    assert (push.status, push.fencing_epoch) == ("in_flight", 1)


def test_a_live_lease_is_held_in_the_database_clock(api, push, monkeypatch):
    """A web process whose clock runs two hours ahead still sees the lease as held."""
    claimed(api, push, lease_seconds=60)
    real_now = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real_now() + timedelta(hours=2))
    assert problem(step(api, push, "claim"), 409)["error"] == "stale_version"
    push.refresh_from_db()
    assert push.fencing_epoch == 1
    assert timedelta(seconds=55) < push.lease_expires_at - db_now() <= timedelta(seconds=60)


def test_a_lapsed_approval_cannot_be_claimed(api, push):
    Operation.objects.filter(pk=push.pk).update(
        approval_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert "expired" in problem(step(api, push, "claim"), 409)["detail"]
    assert status_of(push) == "expired"


# --- intent and report --------------------------------------------------------------------------


@pytest.mark.parametrize("key", [None, "intent-1"])
def test_an_intent_after_cancel_is_refused_and_the_operation_cancelled(api, run, push, key):
    """It never fired: it is cancelled in the same request, even though the request is
    refused (and, with an Idempotency-Key, its 409 is stored with that write)."""
    claimed(api, push)
    cancel_run(run=run, actor=AGENT, reason="stop")
    response = api.post(f"/operations/{push.pk}/intent", {"epoch": 1, "snapshot": {}}, key=key)
    assert problem(response, 409)["error"] == "run_closed"
    push.refresh_from_db()
    assert (push.status, push.intent, push.lease_expires_at) == ("cancelled", None, None)
    assert push.result == {"cancelled": "run cancelled before the effect fired"}
    assert push.checkpoints.filter(from_status="in_flight", to_status="cancelled").count() == 1


def test_a_second_intent_after_cancel_is_refused_and_keeps_the_first(api, run, push):
    claimed(api, push)
    intended(api, push)
    cancel_run(run=run, actor=AGENT, reason="stop")
    before = stored()
    problem(step(api, push, "intent", {"epoch": 1, "snapshot": {"again": True}}), 409)
    assert stored() == before
    push.refresh_from_db()
    assert (push.status, push.intent) == ("in_flight", {"remote_head": "abc123"})


def test_an_intent_while_halted_for_reconciliation_is_refused(api, push, halt):
    claimed(api, push)
    halt()
    before = stored()
    assert problem(step(api, push, "intent", {"epoch": 1}), 409)["error"] == "run_not_accepting"
    assert stored() == before
    push.refresh_from_db()
    assert (push.status, push.intent) == ("in_flight", None)


def test_an_intent_after_the_lease_lapsed_is_refused(api, push):
    claimed(api, push)
    lapse(push)
    before = stored()
    body = problem(step(api, push, "intent", {"epoch": 1}), 409)
    assert body["error"] == "stale_version"
    assert "lapsed" in body["detail"]
    assert stored() == before


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
    assert body["result"] == {
        "verified": True,
        "effect": "applied",
        "output": {"head": "def"},
        "error": "",
    }
    push.refresh_from_db()
    assert (push.status, push.lease_expires_at) == ("committed", None)
    assert push.run.checkpoints.filter(operation=push, to_status="committed").exists()


def test_an_unverified_report_is_a_verification_failure(api, push):
    claimed(api, push)
    intended(api, push)
    response = step(api, push, "report", {"epoch": 1, "verified": False, "error": "head moved"})
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["status_reason"]) == (
        "verify_failed",
        "head moved",
    )
    assert status_of(push) == "verify_failed"


def test_an_absent_effect_ends_the_operation_failed(api, run, push):
    claimed(api, push)
    intended(api, push)
    body = {"epoch": 1, "effect": "absent", "error": "the remote refused the push"}
    response = step(api, push, "report", body)
    assert response.status_code == 200, response.content
    assert (
        response.json()["status_reason"] == "the effect did not happen: the remote refused the push"
    )
    push.refresh_from_db()
    assert (push.status, push.lease_expires_at) == ("failed", None)
    assert push.result == {
        "verified": False,
        "effect": "absent",
        "output": None,
        "error": "the remote refused the push",
    }
    assert not Alert.objects.exists()
    assert problem(step(api, push, "rollback", {"epoch": 1, "outcome": "rolled_back"}), 409)
    assert api.post(f"/runs/{run.pk}/finish", {"status": "completed"}).status_code == 200


def test_an_uncertain_effect_awaits_the_rollback(api, push):
    claimed(api, push)
    intended(api, push)
    response = step(api, push, "report", {"epoch": 1, "effect": "uncertain"})
    assert response.status_code == 200, response.content
    push.refresh_from_db()
    assert push.status == "verify_failed"
    assert push.lease_expires_at is not None  # The rollback comes under the same lease.
    assert push.result["effect"] == "uncertain"


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"verified": True}, "committed"),
        ({"verified": False}, "verify_failed"),
        ({"effect": "applied", "verified": True}, "committed"),
        ({"effect": "absent", "verified": False}, "failed"),
        ({"effect": "uncertain", "verified": False}, "verify_failed"),
    ],
)
def test_verified_is_the_older_form_of_effect(api, push, body, status):
    claimed(api, push)
    intended(api, push)
    assert step(api, push, "report", {"epoch": 1, **body}).status_code == 200
    assert status_of(push) == status


def test_a_report_without_an_intent_is_refused(api, push):
    claimed(api, push)
    before = stored()
    body = problem(step(api, push, "report", {"epoch": 1, "verified": True}), 409)
    assert "intent" in body["detail"]
    assert stored() == before
    assert status_of(push) == "in_flight"


def test_after_cancel_a_report_with_no_intent_is_refused(api, run, push):
    claimed(api, push)
    cancel_run(run=run, actor=AGENT, reason="stop")
    problem(step(api, push, "report", {"epoch": 1, "effect": "applied"}), 409)
    assert status_of(push) == "in_flight"


def test_a_report_after_the_lease_lapsed_is_refused(api, push):
    claimed(api, push)
    intended(api, push)
    lapse(push)
    before = stored()
    body = problem(step(api, push, "report", {"epoch": 1, "effect": "applied"}), 409)
    assert (body["error"], "lapsed" in body["detail"]) == ("stale_version", True)
    assert stored() == before


@pytest.mark.parametrize("effect", ["applied", "absent", "uncertain"])
def test_a_report_after_cancel_is_accepted_when_its_intent_came_first(api, run, push, effect):
    claimed(api, push)
    intended(api, push)
    cancel_run(run=run, actor=AGENT, reason="stop")
    assert step(api, push, "report", {"epoch": 1, "effect": effect}).status_code == 200
    assert (
        status_of(push)
        == {
            "applied": "committed",
            "absent": "failed",
            "uncertain": "verify_failed",
        }[effect]
    )


def test_a_report_and_its_rollback_are_accepted_while_halted(api, run, push, halt):
    claimed(api, push)
    intended(api, push)
    halt()
    assert step(api, push, "report", {"epoch": 1, "effect": "uncertain"}).status_code == 200
    rollback = {"epoch": 1, "outcome": "rolled_back", "detail": "reverted"}
    assert step(api, push, "rollback", rollback).status_code == 200
    assert status_of(push) == "rolled_back"
    run.refresh_from_db()
    assert run.reason == "reconciliation"  # Until a person resolves the other alert.


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"epoch": 1}, "effect"),
        ({"epoch": 1, "effect": "maybe"}, "effect"),
        ({"epoch": 1, "effect": "applied", "verified": False}, "verified"),
        ({"epoch": 1, "effect": "absent", "verified": True}, "verified"),
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
    intended(api, push)
    step(api, push, "report", {"epoch": 1, "verified": True})
    problem(step(api, push, "report", {"epoch": 1, "verified": False}), 409)
    assert status_of(push) == "committed"


def test_a_committed_operation_cannot_be_claimed_again(api, push):
    claimed(api, push)
    intended(api, push)
    step(api, push, "report", {"epoch": 1, "verified": True})
    problem(step(api, push, "claim"), 409)


# --- rollback and alerts ----------------------------------------------------------------------


@pytest.fixture
def unverified(api, push) -> Operation:
    claimed(api, push)
    intended(api, push)
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


def test_a_rollback_is_accepted_after_cancel(api, run, unverified):
    cancel_run(run=run, actor=AGENT, reason="stop")
    rollback = {"epoch": 1, "outcome": "alert", "detail": "check the remote"}
    assert step(api, unverified, "rollback", rollback).status_code == 200
    assert status_of(unverified) == "alerted"
    run.refresh_from_db()
    assert run.status == "cancelled"
    assert Alert.objects.get().operation == unverified


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
    leases_lapsed()

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


# --- finishing the run ---------------------------------------------------------------------


def test_a_run_cannot_finish_over_an_operation_awaiting_its_rollback(api, run, unverified):
    before = stored()
    body = problem(api.post(f"/runs/{run.pk}/finish", {"status": "completed"}), 409)
    assert body["error"] == "run_not_accepting"
    assert f"{unverified.pk} (verify_failed)" in body["detail"]
    assert stored() == before
    step(api, unverified, "rollback", {"epoch": 1, "outcome": "rolled_back"})
    assert api.post(f"/runs/{run.pk}/finish", {"status": "completed"}).status_code == 200
    assert Run.objects.get(pk=run.pk).status == "completed"


def test_a_run_cannot_finish_over_an_operation_in_flight(api, run, push):
    claimed(api, push)
    intended(api, push)
    body = problem(api.post(f"/runs/{run.pk}/finish", {"status": "partial", "outcome": "x"}), 409)
    assert f"{push.pk} (in_flight)" in body["detail"]


def test_an_alert_the_agent_words_is_still_emailed_on_one_line(api, unverified, admin_user):
    """The agent writes the alert's summary: a line break in it must not become a header
    of the admin's email, nor stop the email from going out."""
    detail = "could not undo\r\nBcc: everyone@example.com\nX-Priority: 1"
    step(api, unverified, "rollback", {"epoch": 1, "outcome": "alert", "detail": detail})

    Worker(name="w1").step()

    (email,) = [m for m in mail.outbox if m.to == [admin_user.email]]
    assert "\n" not in email.subject and "\r" not in email.subject
    assert email.subject.endswith("could not undo Bcc: everyone@example.com X-Priority: 1")
    assert email.bcc == [] and "X-Priority" not in email.extra_headers
    delivery = Alert.objects.get(operation=unverified).deliveries.get(channel="email")
    assert delivery.status == "delivered"
