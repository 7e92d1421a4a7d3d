"""Proposing an operation: the agent says what it is about to do, and waits."""

import uuid
from datetime import datetime

from django.db import transaction

from runs.actions.registry import check_name, lane_of, parse
from runs.actors import Actor
from runs.canonical import json_hash
from runs.clock import db_now
from runs.errors import (
    ConflictingProposal,
    ExternalIdConflict,
    IllegalTransition,
    InvalidInput,
    RunNotAccepting,
    StaleVersion,
)
from runs.models import AgentToken, Decision, Operation, Run
from runs.policies import Requirement, requirement_for
from runs.services import slack, webhooks
from runs.services.decisions import expire_if_due
from runs.services.identity import named
from runs.services.runs import (
    AWAITING_DECISION,
    activate,
    paused_by_alert,
    require_open,
    settle_wait,
)
from runs.transitions import (
    lock_run,
    record_operation_proposed,
    transition_operation,
    transition_run,
)

# What a proposal may say about itself, in the agent's words (``Operation`` fields).
SUMMARY_MAX = 300
RATIONALE_MAX = 20_000
# What an agent may withdraw: nothing has fired, nor will.
WITHDRAWABLE = (Operation.Status.PROPOSED, Operation.Status.APPROVED)


# The calls of operators' requeues (``runs.services.requeues``): no agent may take one.
REQUEUE_CALL = "requeue-of-"


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


def propose_operation(**proposal) -> Operation:
    """``submit_proposal``'s operation, new or not."""
    return submit_proposal(**proposal)[0]


def submit_proposal(
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
    external_id: str = "",
    summary: str = "",
    rationale: str = "",
    requeue_of: Operation | None = None,
    requeued_by=None,
    requeue_reason: str = "",
) -> tuple[Operation, bool]:
    """Propose an operation, idempotent on ``call_id`` and on ``external_id`` (see
    ``runs.services.identity``): the same call with the same arguments returns the
    existing operation, whatever happened since; other arguments are refused. Returns
    the operation and whether it is new. A new proposal must be based on the run's
    current version. A registered action's arguments must fit its schema and its
    rollback kind; Oversight's workers execute it. Any other action is executed by the
    agent itself. The project's approval policies set the risk (never below the
    agent's ``risk``, which is kept as ``proposed_risk``) and the approvals required
    (``runs.policies``). ``summary`` and ``rationale`` are the agent's own words on
    why, shown to reviewers. ``requeue_of``, ``requeued_by`` and ``requeue_reason`` are
    an operator's requeue (``runs.services.requeues``)."""
    _validate(call_id, action, arguments, risk, rollback_kind)
    if call_id.startswith(REQUEUE_CALL) and requeue_of is None:
        raise InvalidInput(f"call_id: {REQUEUE_CALL}… names are Oversight's, for requeues")
    for field, text, most in (
        ("summary", summary, SUMMARY_MAX),
        ("rationale", rationale, RATIONALE_MAX),
    ):
        if len(text) > most:
            raise InvalidInput(f"{field}: at most {most} characters")
    check_name(action)
    parsed = parse(action, arguments)
    executor = parsed.executor(rollback_kind)
    arguments_hash = json_hash(arguments)

    def describes(existing: Operation) -> bool:
        return (existing.run_id, existing.call_id, existing.action) == (
            run.pk,
            call_id,
            action,
        ) and (existing.proposed_hash or json_hash(existing.proposed_arguments)) == arguments_hash

    def create() -> tuple[Operation, bool]:
        return _propose(
            run,
            Operation(
                call_id=call_id,
                external_id=external_id,
                action=action,
                proposed_arguments=arguments,
                arguments=arguments,
                arguments_hash=arguments_hash,
                proposed_hash=arguments_hash,
                proposed_risk=risk,
                rollback_kind=rollback_kind,
                executor=executor,
                lane=lane_of(action, arguments, run.project_id),
                gist=parsed.gist(),
                target=parsed.target(),
                base_version=base_version,
                proposed_by_token=token,
                summary=summary,
                rationale=rationale,
                requeue_of=requeue_of,
                requeued_by=requeued_by,
                requeue_reason=requeue_reason,
            ),
            actor,
            now,
        )

    return named(
        Operation,
        project_id=run.project_id,
        token=token,
        external_id=external_id,
        describes=describes,
        create=create,
    )


@transaction.atomic
def _propose(
    run: Run, operation: Operation, actor: Actor, now: datetime | None
) -> tuple[Operation, bool]:
    """Create ``operation`` (its fields from the agent) in ``run``, or return the run's
    operation of the same call."""
    current = lock_run(run.pk)
    existing = current.operations.filter(call_id=operation.call_id).first()
    if existing is not None:
        return _same_call(existing, operation), False
    check_accepting(current)
    if operation.base_version != current.version:
        raise StaleVersion(
            f"proposal based on version {operation.base_version}, but run {current.pk} is at "
            f"version {current.version}: read the run again and re-decide"
        )
    now = now or db_now()
    needed = requirement_for(
        current.project,
        operation.action,
        operation.arguments,
        operation.proposed_risk,
        requeue=operation.requeue_of_id is not None,
    )
    activate(current, actor)
    operation.run, operation.project_id = current, current.project_id
    operation.idempotency_key = uuid.uuid4().hex
    operation.risk, operation.approval_rule = needed.risk, needed.rule
    operation.required_approvals = needed.approvals
    operation.expires_at = now + needed.decision_timeout
    operation.save(force_insert=True)
    record_operation_proposed(operation=operation, actor=actor, run=current)
    if operation.required_approvals == 0:
        _auto_approve(operation, needed, now, current)
    elif current.status != Run.Status.WAITING:
        transition_run(
            run=current,
            to=Run.Status.WAITING,
            actor=actor,
            reason=Run.Reason.APPROVAL,
            unblock=AWAITING_DECISION,
        )
    if operation.status == Operation.Status.PROPOSED:  # Not approved by policy: it waits.
        webhooks.operation_waiting(operation, current)
        slack.waiting(operation, current)
    return operation, True


def check_accepting(run: Run) -> None:
    """Raise unless ``run`` (locked) takes a new proposal now: it is open, waits for
    nothing but decisions, and no open alert holds it."""
    require_open(run)
    if run.status == Run.Status.WAITING and run.reason != Run.Reason.APPROVAL:
        raise RunNotAccepting(f"run {run.pk} is waiting ({run.reason}): {run.unblock}")
    if refusal := paused_by_alert(run):
        raise refusal


def _same_call(existing: Operation, proposal: Operation) -> Operation:
    """The run's operation of ``proposal``'s call_id, if it is the same proposal: the
    same action and arguments, and no other external_id given."""
    same = json_hash(existing.proposed_arguments) == proposal.arguments_hash
    if existing.action != proposal.action or not same:
        raise ConflictingProposal(
            f"call_id {proposal.call_id!r} was already proposed in run {existing.run_id} "
            "with other arguments; use a new call_id"
        )
    if proposal.external_id and existing.external_id != proposal.external_id:
        raise ExternalIdConflict(
            f"external_id: call_id {proposal.call_id!r} was already proposed in run "
            f"{existing.run_id} as {existing.external_id or 'no external_id'}"
        )
    return existing


def _auto_approve(operation: Operation, needed: Requirement, now: datetime, run: Run) -> None:
    """Approval by policy is recorded as a decision by that policy, never silently
    (in the transaction holding the lock of ``run``)."""
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
        run=run,
        to=Operation.Status.APPROVED,
        actor=Actor.policy(label),
        reason="auto-approved by policy",
        changes={"approved_at": now, "approval_expires_at": now + needed.approval_ttl},
        detail={"decision": {"id": decision.pk, "kind": decision.kind, "by": f"policy:{label}"}},
    )


@transaction.atomic
def withdraw_operation(*, operation: Operation, actor: Actor, reason: str = "") -> Operation:
    """The agent takes back its proposal before anything fired: a proposed or approved
    operation is cancelled (a cancelled one is answered as it is), and the run's wait
    settles as after a decision. Once claimed, executed or ended otherwise, it is too
    late (``IllegalTransition``, naming the status)."""
    expire_if_due(operation, db_now())
    run = lock_run(operation.run_id)
    operation.refresh_from_db()
    if operation.status == Operation.Status.CANCELLED:
        return operation
    if operation.status not in WITHDRAWABLE:
        raise IllegalTransition(
            f"operation {operation.pk} is {operation.status}: only a proposed or approved "
            "operation can be withdrawn"
        )
    why = reason or "withdrawn by the agent"
    transition_operation(
        operation=operation,
        to=Operation.Status.CANCELLED,
        actor=actor,
        reason=why,
        changes={"status_reason": why, "result": {"cancelled": why}},
    )
    settle_wait(run, actor)
    return operation
