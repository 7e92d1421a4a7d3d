"""Proposing and reading operations through the agent API: idempotency on call_id,
conflicts, argument limits, and long polling for a decision."""

import threading
import time

import pytest
from django.db import connection

from runs.models import Operation
from runs.services.runs import cancel_run, finish_run
from tests.api_helpers import agent_proposal, nested, problem, proposal
from tests.conftest import AGENT
from tests.helpers import decide_on, stored
from tests.test_api_waits import LONGEST_WAIT, until_long_polls_wait

pytest_plugins = ["tests.api_helpers"]


# --- proposing ------------------------------------------------------------------------------


def test_propose_an_operation(api, run):
    version = api.run_version(run.pk)
    response = api.propose(run.pk, proposal("call-1", risk="low"))
    assert response.status_code == 201
    body = response.json()
    op = Operation.objects.get(pk=body["id"])
    assert (op.run, op.call_id, op.action, op.status) == (
        run,
        "call-1",
        "ledger.transfer",
        "proposed",
    )
    assert op.base_version == version
    assert (
        body["arguments"]
        == body["proposed_arguments"]
        == {"from": "A", "to": "B", "amount": "100.00"}
    )
    assert body["arguments_hash"] == op.arguments_hash
    assert body["idempotency_key"] == op.idempotency_key
    assert (body["risk"], body["executor"], body["required_approvals"]) == ("low", "server", 1)
    assert body["decisions"] == []
    assert body["lease"] == {"owner": "", "epoch": 0, "expires_at": None}
    run.refresh_from_db()
    assert (run.status, run.reason) == ("waiting", "approval")
    assert body["run_version"] == run.version


def test_an_unregistered_action_is_executed_by_the_agent(api, run):
    body = api.propose(run.pk, agent_proposal()).json()
    assert (body["action"], body["executor"], body["rollback_kind"]) == (
        "git.push",
        "agent",
        "none",
    )


def test_a_high_risk_operation_needs_two_approvals(api, run):
    assert api.propose(run.pk, proposal(risk="high")).json()["required_approvals"] == 2


def test_repeating_a_proposal_returns_the_same_operation(api, run):
    first = api.propose(run.pk, proposal("call-1"))
    again = api.propose(run.pk, proposal("call-1"))
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert Operation.objects.count() == 1


def test_a_repeat_is_answered_even_after_the_run_moved_on(api, run, reviewer):
    first = api.propose(run.pk, proposal("call-1")).json()
    decide_on(Operation.objects.get(pk=first["id"]), reviewer)
    again = api.post(f"/runs/{run.pk}/operations", {**proposal("call-1"), "base_version": 0})
    assert again.status_code == 200
    assert (again.json()["id"], again.json()["status"]) == (first["id"], "approved")


@pytest.mark.parametrize(
    "change",
    [
        {"arguments": {"from": "A", "to": "B", "amount": "999.00"}},
        agent_proposal("call-1"),
    ],
    ids=["other arguments", "other action"],
)
def test_the_same_call_id_for_something_else_is_a_conflict(api, run, change):
    api.propose(run.pk, proposal("call-1"))
    before = stored()
    response = api.propose(run.pk, {**proposal("call-1"), **change})
    assert problem(response, 409)["error"] == "conflicting_proposal"
    assert stored() == before


def test_a_proposal_from_a_stale_version_is_a_conflict(api, run):
    version = api.run_version(run.pk)
    api.post(f"/runs/{run.pk}/messages", {"payload": {"text": "thinking"}})
    api.propose(run.pk, proposal("call-1"))
    before = stored()
    response = api.propose(run.pk, proposal("call-2", base_version=version))
    body = problem(response, 409)
    assert body["error"] == "stale_version"
    assert "read the run again" in body["detail"]
    assert stored() == before


@pytest.mark.parametrize("ending", ["cancelled", "completed", "failed"])
def test_a_closed_run_takes_no_proposals(api, run, ending):
    if ending == "cancelled":
        cancel_run(run=run, actor=AGENT, reason="stop")
    else:
        finish_run(run=run, status=ending, actor=AGENT, outcome="over")
    before = stored()
    response = api.propose(run.pk, proposal("call-1"))
    assert problem(response, 409)["error"] == "run_closed"
    assert stored() == before


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"call_id": ""}, "call_id"),
        ({"call_id": "c" * 201}, "call_id"),
        ({"action": ""}, "action"),
        ({"action": "a" * 101}, "action"),
        ({"arguments": ["not", "an", "object"]}, "arguments"),
        ({"risk": "extreme"}, "risk"),
        ({"rollback_kind": "maybe"}, "rollback_kind"),
        ({"base_version": -1}, "base_version"),
        ({"base_version": "now"}, "base_version"),
        ({"arguments": {"from": "A", "to": "B"}}, "arguments.amount"),
        ({"rollback_kind": "none"}, "rollback_kind"),
    ],
)
def test_proposal_fields_are_checked(api, run, change, field):
    before = stored()
    problem(api.propose(run.pk, {**proposal(), **change}), 422, field)
    assert stored() == before


@pytest.mark.parametrize("missing", ["call_id", "action", "arguments", "rollback_kind"])
def test_a_proposal_missing_a_field_names_it(api, run, missing):
    body = proposal()
    del body[missing]
    problem(api.propose(run.pk, body), 422, missing)
    assert not Operation.objects.exists()


def test_arguments_over_their_size_limit_are_refused(api, run, settings):
    settings.OVERSIGHT_API_MAX_ARGUMENTS_BYTES = 100
    arguments = {"remote": "origin", "note": "x" * 100}
    response = api.propose(run.pk, agent_proposal(arguments=arguments))
    assert problem(response, 413, "arguments")["error"] == "limit_exceeded"
    assert not Operation.objects.exists()


def test_arguments_nested_too_deep_are_refused(api, run, settings):
    depth = settings.OVERSIGHT_API_MAX_DEPTH
    response = api.propose(run.pk, agent_proposal(arguments=nested(depth + 1)))
    assert str(depth) in problem(response, 422, "arguments")["detail"]
    assert not Operation.objects.exists()


def test_arguments_at_the_depth_limit_are_accepted(api, run, settings):
    depth = settings.OVERSIGHT_API_MAX_DEPTH
    response = api.propose(run.pk, agent_proposal(arguments=nested(depth)))
    assert response.status_code == 201
    assert Operation.objects.get(pk=response.json()["id"]).arguments == nested(depth)


def test_an_unknown_run_is_not_found(api):
    problem(api.post("/runs/999999/operations", {**proposal(), "base_version": 2}), 404)


def test_a_run_halted_for_reconciliation_takes_no_new_proposals(api, run, reviewer):
    op_id = api.propose(run.pk, agent_proposal()).json()["id"]
    decide_on(Operation.objects.get(pk=op_id), reviewer)
    api.post(f"/operations/{op_id}/claim", {})
    api.post(f"/operations/{op_id}/intent", {"epoch": 1})
    api.post(f"/operations/{op_id}/report", {"epoch": 1, "verified": False})
    api.post(f"/operations/{op_id}/rollback", {"epoch": 1, "outcome": "alert"})
    response = api.propose(run.pk, proposal("call-2"))
    assert problem(response, 409)["error"] == "run_not_accepting"


# --- reading ------------------------------------------------------------------------------


def test_read_an_operation(api, run, propose, reviewer):
    op = propose("call-1")
    decide_on(op, reviewer, comment="fine")
    body = api.get(f"/operations/{op.pk}").json()
    assert (body["id"], body["run"], body["status"], body["version"]) == (
        op.pk,
        run.pk,
        "approved",
        op.version,
    )
    assert [(d["kind"], d["by"], d["comment"]) for d in body["decisions"]] == [
        ("approve", "reviewer", "fine")
    ]
    assert body["decisions"][0]["arguments_hash"] == op.arguments_hash


def test_a_rejection_reaches_the_agent_with_its_reason(api, propose, reviewer):
    op = propose("call-1")
    decide_on(op, reviewer, "reject", comment="Wrong account")
    body = api.get(f"/operations/{op.pk}").json()
    assert (body["status"], body["status_reason"]) == ("rejected", "Wrong account")
    assert body["result"] == {"decision": "rejected", "reason": "Wrong account"}


def test_an_unknown_operation_is_not_found(api):
    problem(api.get("/operations/999999"), 404)


@pytest.mark.parametrize("wait", [-1, 31, "soon"])
def test_a_wait_out_of_bounds_is_refused(api, propose, wait):
    op = propose("call-1")
    problem(api.get(f"/operations/{op.pk}", {"wait": wait}), 422, "wait")


def test_the_wait_bound_follows_the_setting(api, propose, settings):
    settings.OVERSIGHT_API_MAX_WAIT_SECONDS = 2
    op = propose("call-1")
    problem(api.get(f"/operations/{op.pk}", {"wait": 3}), 422, "wait")


def test_a_wait_without_a_change_answers_when_it_ends(api, propose):
    op = propose("call-1")
    started = time.monotonic()
    response = api.get(f"/operations/{op.pk}", {"wait": 1})
    assert time.monotonic() - started >= 1.0
    assert response.json()["status"] == "proposed"


def test_a_wait_from_an_older_version_answers_at_once(api, propose, reviewer):
    op = propose("call-1")
    seen = op.version
    decide_on(op, reviewer)
    started = time.monotonic()
    response = api.get(f"/operations/{op.pk}", {"wait": LONGEST_WAIT, "version": seen})
    assert time.monotonic() - started < LONGEST_WAIT, "it waited"
    assert response.json()["status"] == "approved"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", ["approve", "reject"])
def test_a_long_poll_wakes_at_the_decision(api, propose, reviewer, kind):
    """The reviewer decides once the poll waits; the poll answers with the decision
    before its wait is out."""
    op = propose("call-1")
    decided = []

    def review() -> None:
        try:
            until_long_polls_wait(1)
            decide_on(op, reviewer, kind, comment="decided")
            decided.append(kind)
        finally:
            connection.close()

    reviewer_thread = threading.Thread(target=review)
    reviewer_thread.start()
    try:
        started = time.monotonic()
        response = api.get(f"/operations/{op.pk}", {"wait": LONGEST_WAIT})
        waited = time.monotonic() - started
    finally:
        reviewer_thread.join(timeout=90)
    assert decided == [kind], "the reviewer's decision failed"
    assert waited < LONGEST_WAIT, "the decision did not end the wait"
    assert response.json()["status"] == {"approve": "approved", "reject": "rejected"}[kind]
