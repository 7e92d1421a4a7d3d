"""Proposing an operation: the agent says what it is about to do, and waits."""

import uuid
from datetime import datetime

from django.db import transaction

from runs.actions.registry import check_proposal
from runs.actors import Actor
from runs.canonical import json_hash
from runs.clock import db_now
from runs.errors import ConflictingProposal, InvalidInput, RunNotAccepting, StaleVersion
from runs.models import AgentToken, Decision, Operation, Run
from runs.policies import Requirement, requirement_for
from runs.services.runs import AWAITING_DECISION, activate, paused_by_alert, require_open
from runs.transitions import (
    lock_run,
    record_operation_proposed,
    transition_operation,
    transition_run,
)


def _validate(call_id: str, action: str, arguments, risk: str, rollback_kind: str) -> None:
    if not call_id or len(call_id) > 200:
        raise InvalidInput("call_id: 1 to 200 characters")
    if not action or len(action) > 100:
        raise InvalidInput("action: 1 to 100 characters")
    if not isinstance(arguments, dict):
        raise InvalidInput("arguments: must be a JSON object")
    if risk not in Operation.Risk.values:
        raise InvalidInput(f"risk: one of {', '.join(Operation.Risk.values)}")
    if rollback_kind not in Operation.RollbackKind.values:
        raise InvalidInput(f"rollback_kind: one of {', '.join(Operation.RollbackKind.values)}")


@transaction.atomic
def propose_operation(
    *,
    run: Run,
    call_id: str,
    action: str,
    arguments: dict,
    risk: str,
    rollback_kind: str,
    base_version: int,
    actor: Actor,
    token: AgentToken | None = None,
    now: datetime | None = None,
) -> Operation:
    """Propose an operation, idempotent on ``call_id``: the same call with the same
    arguments returns the existing operation, whatever happened since; other arguments
    are refused. A new proposal must be based on the run's current version. A
    registered action's arguments must fit its schema and its rollback kind; Oversight's
    workers execute it. Any other action is executed by the agent itself. The project's
    approval policies set the risk (never below the agent's ``risk``, which is kept as
    ``proposed_risk``) and the approvals required (``runs.policies``)."""
    _validate(call_id, action, arguments, risk, rollback_kind)
    executor = check_proposal(action, arguments, rollback_kind)
    arguments_hash = json_hash(arguments)
    current = lock_run(run.pk)
    existing = current.operations.filter(call_id=call_id).first()
    if existing is not None:
        if existing.action == action and json_hash(existing.proposed_arguments) == arguments_hash:
            return existing
        raise ConflictingProposal(
            f"call_id {call_id!r} was already proposed in run {current.pk} "
            "with other arguments; use a new call_id"
        )
    require_open(current)
    if current.status == Run.Status.WAITING and current.reason != Run.Reason.APPROVAL:
        raise RunNotAccepting(f"run {current.pk} is waiting ({current.reason}): {current.unblock}")
    if refusal := paused_by_alert(current):
        raise refusal
    if base_version != current.version:
        raise StaleVersion(
            f"proposal based on version {base_version}, but run {current.pk} is at "
            f"version {current.version}: read the run again and re-decide"
        )
    now = now or db_now()
    needed = requirement_for(current.project, action, arguments, risk)
    activate(current, actor)
    operation = Operation.objects.create(
        run=current,
        project_id=current.project_id,
        call_id=call_id,
        action=action,
        proposed_arguments=arguments,
        arguments=arguments,
        arguments_hash=arguments_hash,
        idempotency_key=uuid.uuid4().hex,
        risk=needed.risk,
        proposed_risk=risk,
        approval_rule=needed.rule,
        rollback_kind=rollback_kind,
        executor=executor,
        required_approvals=needed.approvals,
        base_version=base_version,
        expires_at=now + needed.decision_timeout,
        proposed_by_token=token,
    )
    record_operation_proposed(operation=operation, actor=actor)
    if operation.required_approvals == 0:
        _auto_approve(operation, needed, now)
    elif current.status != Run.Status.WAITING:
        transition_run(
            run=current,
            to=Run.Status.WAITING,
            actor=actor,
            reason=Run.Reason.APPROVAL,
            unblock=AWAITING_DECISION,
        )
    return operation


def _auto_approve(operation: Operation, needed: Requirement, now: datetime) -> None:
    """Approval by policy is recorded as a decision by that policy, never silently."""
    label = needed.policy_label
    decision = Decision.objects.create(
        operation=operation,
        policy=label,
        kind=Decision.Kind.APPROVE,
        arguments_hash=operation.arguments_hash,
        comment="approved automatically by policy",
    )
    transition_operation(
        operation=operation,
        to=Operation.Status.APPROVED,
        actor=Actor.policy(label),
        reason="auto-approved by policy",
        changes={"approved_at": now, "approval_expires_at": now + needed.approval_ttl},
        detail={"decision": {"id": decision.pk, "kind": decision.kind, "by": f"policy:{label}"}},
    )
