"""propose_operation: what an agent's proposal writes, and every way it is refused."""

import pytest

from runs.actors import Actor, ActorKind
from runs.errors import (
    ConflictingProposal,
    InvalidInput,
    RunClosed,
    RunNotAccepting,
    StaleVersion,
)
from runs.models import ApprovalPolicy, Checkpoint, Operation, Run
from runs.services.runs import cancel_run, finish_run, request_input
from tests.conftest import AGENT
from tests.helpers import refused, steps_since, stored

AUTO, ONE, TWO = ApprovalPolicy.Approvals


def policy(project, action: str, approvals: int) -> ApprovalPolicy:
    return ApprovalPolicy.objects.create(
        project=project, action=action, approvals_required=approvals
    )


def test_proposal_is_checkpointed_and_the_run_waits_for_approval(run, propose):
    before = run.version

    op = propose(arguments={"from": "A", "to": "B", "amount": 100})

    assert op.status == Operation.Status.PROPOSED
    assert op.proposed_arguments == op.arguments == {"from": "A", "to": "B", "amount": 100}
    assert op.base_version == before
    assert steps_since(run, before) == [
        ("operation.proposed", "", "proposed"),
        ("run.status", "running", "waiting"),
    ]
    assert Checkpoint.objects.get(run=run, event="operation.proposed").operation == op
    run.refresh_from_db()
    assert run.status == Run.Status.WAITING
    assert run.reason == Run.Reason.APPROVAL
    assert run.unblock.strip()


def test_same_call_id_and_arguments_return_the_same_operation(run, propose):
    first = propose("call-1", arguments={"from": "A", "to": "B", "amount": 100})
    propose("call-2")  # The run moves on past the first proposal's base version.
    before = stored()

    again = propose(
        "call-1", arguments={"amount": 100, "to": "B", "from": "A"}, base_version=first.base_version
    )

    assert again.pk == first.pk
    assert stored() == before


@pytest.mark.parametrize(
    "change",
    [{"arguments": {"from": "A", "to": "B", "amount": 999}}, {"action": "ledger.refund"}],
    ids=["other-arguments", "other-action"],
)
def test_same_call_id_with_another_proposal_conflicts(propose, change):
    propose("call-1")

    with refused(ConflictingProposal):
        propose("call-1", **change)


def test_proposal_on_a_stale_version_is_refused(run, propose):
    with refused(StaleVersion):
        propose(base_version=run.version - 1)


def test_proposal_on_a_cancelled_run_is_refused(run, propose, admin_user):
    cancel_run(run=run, actor=Actor.of_user(admin_user), reason="budget frozen")

    with refused(RunClosed):
        propose()


@pytest.mark.parametrize("status", [Run.Status.COMPLETED, Run.Status.FAILED])
def test_proposal_on_a_finished_run_is_refused(run, propose, status):
    finish_run(run=run, status=status, actor=AGENT, outcome="over")

    with refused(RunClosed):
        propose()


def test_proposal_while_the_run_waits_for_input_is_refused(run, propose):
    request_input(run=run, question="Which account?", actor=AGENT)

    with refused(RunNotAccepting):
        propose()


@pytest.mark.parametrize(
    "bad",
    [
        {"call_id": ""},
        {"action": ""},
        {"arguments": ["from", "A"]},
        {"risk": "extreme"},
        {"rollback_kind": "magic"},
    ],
    ids=["empty-call-id", "empty-action", "list-arguments", "bad-risk", "bad-rollback-kind"],
)
def test_invalid_proposal_is_refused(propose, bad):
    with refused(InvalidInput):
        propose(**bad)


def test_auto_policy_approves_at_once_as_the_policy(run, project, propose):
    policy(project, "ledger.transfer", AUTO)
    before = run.version

    op = propose()

    assert op.status == Operation.Status.APPROVED
    assert op.required_approvals == 0
    assert op.approved_at is not None
    assert op.approval_expires_at > op.approved_at
    decision = op.decisions.get()
    assert decision.reviewer is None
    assert decision.policy.strip()
    assert steps_since(run, before) == [
        ("operation.proposed", "", "proposed"),
        ("operation.status", "proposed", "approved"),
    ]
    assert Checkpoint.objects.get(run=run, seq=before + 2).actor_kind == ActorKind.POLICY
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING


@pytest.mark.parametrize(
    ("rows", "risk", "expected"),
    [
        ([], Operation.Risk.MEDIUM, 1),
        ([("other.action", AUTO)], Operation.Risk.MEDIUM, 1),
        ([("ledger.transfer", TWO)], Operation.Risk.LOW, 2),
        ([("", TWO)], Operation.Risk.MEDIUM, 2),
        ([("ledger.transfer", AUTO)], Operation.Risk.HIGH, 2),
        ([("", TWO), ("ledger.transfer", ONE)], Operation.Risk.MEDIUM, 1),
        ([("", AUTO), ("ledger.transfer", TWO)], Operation.Risk.MEDIUM, 2),
    ],
    ids=[
        "no-policy",
        "other-action-only",
        "two",
        "default-row",
        "high-risk-beats-auto",
        "action-row-beats-default",
        "action-row-beats-auto-default",
    ],
)
def test_required_approvals_follow_policy_and_risk(run, project, propose, rows, risk, expected):
    for action, approvals in rows:
        policy(project, action, approvals)

    op = propose(risk=risk)

    assert op.required_approvals == expected
    assert op.status == Operation.Status.PROPOSED
    assert not op.decisions.exists()
    run.refresh_from_db()
    assert run.status == Run.Status.WAITING
