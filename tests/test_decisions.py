"""decide(): approve, reject, reply, edit-and-approve, the two-person rule, and expiry."""

from datetime import timedelta
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.utils import timezone

from runs.actors import ActorKind
from runs.canonical import json_hash
from runs.errors import (
    ArgumentsChanged,
    DecisionRefused,
    InvalidInput,
    NotPermitted,
    OperationExpired,
)
from runs.models import Checkpoint, Decision, Operation, Run
from runs.services.decisions import APPROVAL_LAPSED, DECISION_TIMEOUT, expire_due_operations
from tests.helpers import decide_on, refused, steps_since

APPROVE, REJECT, REPLY, EDIT = (
    Decision.Kind.APPROVE,
    Decision.Kind.REJECT,
    Decision.Kind.REPLY,
    Decision.Kind.EDIT,
)
EDITED = {"from": "A", "to": "C", "amount": 100}


def version_of(run: Run) -> int:
    return Run.objects.values_list("version", flat=True).get(pk=run.pk)


@pytest.fixture
def op(propose) -> Operation:
    return propose()


@pytest.fixture
def high_op(propose) -> Operation:
    return propose(risk=Operation.Risk.HIGH)


def test_approval_approves_and_requeues_the_run(run, op, reviewer):
    before, now = version_of(run), timezone.now()

    decision = decide_on(op, reviewer, now=now)

    op.refresh_from_db()
    assert op.status == Operation.Status.APPROVED
    assert op.approved_at == now
    assert op.approval_expires_at == now + settings.OVERSIGHT_APPROVAL_TTL
    assert (decision.reviewer, decision.arguments_hash) == (reviewer, op.arguments_hash)
    assert steps_since(run, before) == [
        ("operation.status", "proposed", "approved"),
        ("run.status", "waiting", "queued"),
    ]
    run.refresh_from_db()
    assert (run.status, run.reason) == (Run.Status.QUEUED, "")


def test_run_keeps_waiting_while_another_proposal_awaits_a_decision(run, propose, reviewer):
    first, _second = propose("call-1"), propose("call-2")
    before = version_of(run)

    decide_on(first, reviewer)

    assert steps_since(run, before) == [("operation.status", "proposed", "approved")]
    run.refresh_from_db()
    assert run.status == Run.Status.WAITING


@pytest.mark.parametrize("kind", [REJECT, REPLY])
@pytest.mark.parametrize("comment", ["", "   "])
def test_rejection_and_reply_need_a_comment(op, reviewer, kind, comment):
    with refused(InvalidInput):
        decide_on(op, reviewer, kind, comment=comment)


def test_rejection_records_its_reason_as_the_result(run, op, reviewer):
    before = version_of(run)

    decide_on(op, reviewer, REJECT, comment="wrong supplier")

    op.refresh_from_db()
    assert op.status == Operation.Status.REJECTED
    assert op.status_reason == "wrong supplier"
    assert op.result == {"decision": "rejected", "reason": "wrong supplier"}
    assert steps_since(run, before) == [
        ("operation.status", "proposed", "rejected"),
        ("run.status", "waiting", "queued"),
    ]


def test_reply_gives_the_agent_a_message_to_read(op, reviewer):
    decision = decide_on(op, reviewer, REPLY, comment="Pay from account C instead")

    op.refresh_from_db()
    assert decision.kind == REPLY
    assert op.status == Operation.Status.REJECTED
    assert op.result["reply"] == "Pay from account C instead"


def test_edit_and_approve_keeps_the_proposal_for_the_diff(op, reviewer):
    proposed = op.arguments

    decision = decide_on(op, reviewer, EDIT, arguments=EDITED)

    op.refresh_from_db()
    assert op.status == Operation.Status.APPROVED
    assert op.arguments == EDITED
    assert op.arguments_hash == json_hash(EDITED) == decision.arguments_hash
    assert op.proposed_arguments == proposed
    assert (decision.kind, decision.edited_arguments) == (EDIT, EDITED)


def test_decision_on_arguments_no_longer_current_is_refused(high_op, reviewer, reviewer2):
    seen = high_op.arguments_hash
    decide_on(high_op, reviewer, EDIT, arguments=EDITED)

    with refused(ArgumentsChanged):
        decide_on(high_op, reviewer2, arguments_hash=seen)


def test_run_owner_cannot_decide(op, owner):
    with refused(DecisionRefused):
        decide_on(op, owner)


@pytest.mark.parametrize("who", ["auditor", "admin_user", "outsider"])
def test_users_without_the_decide_role_here_cannot_decide(request, op, who):
    with refused(NotPermitted):
        decide_on(op, request.getfixturevalue(who))


def test_high_risk_first_approval_keeps_the_operation_proposed(run, high_op, reviewer):
    before = version_of(run)

    decide_on(high_op, reviewer)

    high_op.refresh_from_db()
    assert high_op.status == Operation.Status.PROPOSED
    assert steps_since(run, before) == [("operation.approval", "proposed", "proposed")]
    run.refresh_from_db()
    assert run.status == Run.Status.WAITING


def test_same_reviewer_cannot_give_the_second_approval(high_op, reviewer):
    decide_on(high_op, reviewer)

    with refused(DecisionRefused):
        decide_on(high_op, reviewer)

    assert high_op.decisions.filter(kind__in=Decision.APPROVING).count() == 1


def test_second_reviewer_completes_a_two_person_approval(run, high_op, reviewer, reviewer2):
    decide_on(high_op, reviewer)
    before = version_of(run)

    decide_on(high_op, reviewer2)

    high_op.refresh_from_db()
    assert high_op.status == Operation.Status.APPROVED
    assert steps_since(run, before) == [
        ("operation.status", "proposed", "approved"),
        ("run.status", "waiting", "queued"),
    ]


def test_edit_during_two_person_approval_resets_prior_approvals(run, high_op, reviewer, reviewer2):
    decide_on(high_op, reviewer)
    before = version_of(run)

    decide_on(high_op, reviewer2, EDIT, arguments=EDITED)

    high_op.refresh_from_db()
    assert high_op.status == Operation.Status.PROPOSED
    assert steps_since(run, before) == [("operation.edit", "proposed", "proposed")]
    pending = Checkpoint.objects.get(run=run, seq=before + 1).state["pending_operations"]
    assert pending[0]["approved_by"] == [reviewer2.username]
    with refused(DecisionRefused):
        decide_on(high_op, reviewer2)

    decide_on(high_op, reviewer)

    high_op.refresh_from_db()
    assert high_op.status == Operation.Status.APPROVED
    assert high_op.arguments == EDITED


def test_edit_back_to_earlier_arguments_does_not_revive_their_approvals(
    run, high_op, reviewer, reviewer2
):
    original = high_op.arguments
    decide_on(high_op, reviewer)
    decide_on(high_op, reviewer, EDIT, arguments=EDITED)
    before = version_of(run)

    decide_on(high_op, reviewer2, EDIT, arguments=original)

    assert high_op.status == Operation.Status.PROPOSED
    assert high_op.arguments == original
    edit = Checkpoint.objects.get(run=run, seq=before + 1)
    assert (edit.event, edit.reason) == (
        "operation.edit",
        "1 of 2 approvals for the edited arguments",
    )

    decide_on(high_op, reviewer)

    assert high_op.status == Operation.Status.APPROVED


def test_checkpoint_state_drops_approvals_an_edit_retracted(run, high_op, reviewer, reviewer2):
    original = high_op.arguments
    decide_on(high_op, reviewer)
    decide_on(high_op, reviewer, EDIT, arguments=EDITED)
    before = version_of(run)

    decide_on(high_op, reviewer2, EDIT, arguments=original)
    decide_on(high_op, reviewer)

    states = Checkpoint.objects.filter(run=run, seq__gt=before, operation=high_op)
    assert [
        state["pending_operations"][0]["approved_by"]
        for state in states.order_by("seq").values_list("state", flat=True)
    ] == [[reviewer2.username], [reviewer2.username, reviewer.username]]


@pytest.mark.parametrize(("kind", "comment"), [(APPROVE, ""), (REJECT, "no")])
def test_decision_on_an_already_decided_operation_is_refused(
    op, reviewer, reviewer2, kind, comment
):
    decide_on(op, reviewer, kind, comment=comment)

    with refused(DecisionRefused):
        decide_on(op, reviewer2, REJECT, comment="too late")


def test_decision_after_the_deadline_expires_the_operation(run, op, reviewer):
    before = version_of(run)

    with pytest.raises(OperationExpired):
        decide_on(op, reviewer, now=op.expires_at + timedelta(seconds=1))

    op.refresh_from_db()
    assert op.status == Operation.Status.EXPIRED
    assert op.status_reason == DECISION_TIMEOUT == "decision timeout"
    assert not op.decisions.exists()
    assert steps_since(run, before) == [
        ("operation.status", "proposed", "expired"),
        ("run.status", "waiting", "queued"),
    ]
    checkpoint = Checkpoint.objects.get(run=run, seq=before + 1)
    assert (checkpoint.actor_kind, checkpoint.actor_user) == (ActorKind.POLICY, None)


def test_expire_due_operations_expires_only_what_is_overdue(propose, reviewer):
    now = timezone.now()
    propose("overdue", now=now - settings.OVERSIGHT_DECISION_TIMEOUT * 2)
    propose("pending")
    lapsed, approved = propose("lapsed"), propose("approved")
    decide_on(lapsed, reviewer, now=now - settings.OVERSIGHT_APPROVAL_TTL * 2)
    decide_on(approved, reviewer, now=now)
    versions = dict(Operation.objects.values_list("call_id", "version"))

    assert expire_due_operations(now=now) == 2

    assert {
        call_id: (status, reason, version)
        for call_id, status, reason, version in Operation.objects.values_list(
            "call_id", "status", "status_reason", "version"
        )
    } == {
        "overdue": (Operation.Status.EXPIRED, DECISION_TIMEOUT, versions["overdue"] + 1),
        "pending": (Operation.Status.PROPOSED, "", versions["pending"]),
        "lapsed": (Operation.Status.EXPIRED, APPROVAL_LAPSED, versions["lapsed"] + 1),
        "approved": (Operation.Status.APPROVED, "", versions["approved"]),
    }
    assert not Decision.objects.filter(operation__call_id="overdue").exists()


def test_expire_operations_command(propose):
    op = propose(now=timezone.now() - settings.OVERSIGHT_DECISION_TIMEOUT * 2)
    out = StringIO()

    call_command("expire_operations", stdout=out)

    op.refresh_from_db()
    assert op.status == Operation.Status.EXPIRED
    assert "1 operation(s) expired" in out.getvalue()
