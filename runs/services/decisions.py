"""Deciding on proposals: approve, reject, reply, edit-and-approve; and expiry.

Every decision is bound to the arguments hash the reviewer saw, and to the preview of
the effect they were shown (kept with the decision's checkpoint); an edit, to the
preview of the edited arguments, which its reviewer sees before approving them. The
rules, checked in one transaction under the run lock: the reviewer holds the decide
permission in the project; does not own the run nor the agent token that proposed the
operation; the run is open; the operation still awaits a decision and has not expired;
a second approval comes from a different person.
"""

from datetime import datetime
from operator import attrgetter

from django.db import transaction

from runs.actions.registry import check_proposal, lane_of, parse
from runs.actors import Actor
from runs.canonical import json_hash
from runs.clock import db_now
from runs.errors import ArgumentsChanged, DecisionRefused, InvalidInput, OperationExpired
from runs.models import Decision, Operation
from runs.permissions import own_interest, require_project_perm
from runs.policies import requirement_after_edit, stricter
from runs.services import slack, webhooks
from runs.services.previews import preview_of, seen_preview
from runs.services.runs import require_open, settle_wait
from runs.transitions import lock_run, transition_operation

DECISION_TIMEOUT = "decision timeout"
APPROVAL_LAPSED = "approval lapsed"


def decide(
    *,
    operation: Operation,
    reviewer,
    kind: str,
    arguments_hash: str,
    comment: str = "",
    arguments: dict | None = None,
    preview_hash: str | None = None,
    via: str = "",
    now: datetime | None = None,
) -> Decision:
    """Record ``reviewer``'s decision of ``kind`` on the arguments they saw.

    ``comment`` is the reason for a rejection, the reply the agent reads for a reply,
    and optional otherwise; ``arguments`` are the edited arguments for an edit;
    ``preview_hash`` is the hash of the effect's preview they were shown ("" for none;
    None when deciding without a page, e.g. a script): for an edit, the preview of the
    edited arguments. ``via`` names where the decision was made when it was not the
    page (e.g. "slack"), for its checkpoint.
    """
    if kind not in Decision.Kind.values:
        raise InvalidInput(f"kind: one of {', '.join(Decision.Kind.values)}")
    if kind in (Decision.Kind.REJECT, Decision.Kind.REPLY) and not comment.strip():
        raise InvalidInput("comment: a rejection needs a reason, a reply needs a message")
    if kind == Decision.Kind.EDIT:
        if not isinstance(arguments, dict):
            raise InvalidInput("arguments: an edit needs the new arguments as a JSON object")
        check_proposal(operation.action, arguments, operation.rollback_kind)
    require_project_perm(reviewer, operation.project, "decide_operation")
    now = now or db_now()
    if expire_if_due(operation, now):
        raise OperationExpired(f"operation {operation.pk} expired before this decision")
    # Read from the target before the run is locked (a preview may take a while). An
    # edit is bound to the effect of the arguments it approves, as its reviewer was
    # shown it before approving: that is the preview kept with the decision.
    previewed = arguments if kind == Decision.Kind.EDIT else None
    shown = None if preview_hash is None else (preview_of(operation, previewed), preview_hash)
    return _record_decision(
        operation, reviewer, kind, arguments_hash, comment, arguments, shown, via, now
    )


@transaction.atomic
def _record_decision(
    operation, reviewer, kind, arguments_hash, comment, arguments, shown, via, now
):
    run = lock_run(operation.run_id)
    operation = Operation.objects.select_related("project").get(pk=operation.pk)
    operation.run = run  # Every transition below goes through the locked run.
    require_open(run)
    if operation.status != Operation.Status.PROPOSED:
        raise DecisionRefused(
            f"operation {operation.pk} is {operation.get_status_display()}; "
            "it no longer awaits a decision"
        )
    if conflict := own_interest(operation, reviewer):
        raise DecisionRefused(conflict)
    if arguments_hash != operation.arguments_hash:
        raise ArgumentsChanged(
            f"operation {operation.pk} has other arguments than the ones you saw: look again"
        )
    seen = seen_preview(operation, *shown) if shown else None
    actor = Actor.of_user(reviewer)
    if kind in (Decision.Kind.REJECT, Decision.Kind.REPLY):
        decision = _reject(run, operation, reviewer, kind, comment, actor, seen, via)
    else:
        decision = _approve(
            run, operation, reviewer, kind, comment, arguments, actor, seen, via, now
        )
    if operation.status != Operation.Status.PROPOSED:  # Not one approval of two: decided.
        webhooks.decided(operation, reviewer, comment)
        slack.decided(operation, reviewer, comment)
    settle_wait(run, actor, locked=True)
    return decision


def _reject(run, operation, reviewer, kind, comment, actor, seen, via) -> Decision:
    decision = Decision.objects.create(
        operation=operation,
        reviewer=reviewer,
        kind=kind,
        arguments_hash=operation.arguments_hash,
        preview_sha256=seen.artifact.sha256 if seen else "",
        comment=comment,
    )
    observation = {"decision": "rejected", "reason": comment}
    if kind == Decision.Kind.REPLY:
        observation = {"decision": "rejected", "reply": comment}
    transition_operation(
        operation=operation,
        to=Operation.Status.REJECTED,
        actor=actor,
        reason=comment,
        changes={"status_reason": comment, "result": observation},
        detail={"decision": _describe(decision, via), "observation": observation},
        artifacts=[seen] if seen else [],
        run=run,
    )
    return decision


def _approve(run, operation, reviewer, kind, comment, arguments, actor, seen, via, now) -> Decision:
    """``run`` is the operation's run, locked by the caller, whose transaction the
    transition joins."""
    changes = {}
    decided_hash = operation.arguments_hash
    if kind == Decision.Kind.EDIT:
        decided_hash = json_hash(arguments)
        if decided_hash == operation.arguments_hash:
            kind, arguments = Decision.Kind.APPROVE, None
        else:
            parsed = parse(operation.action, arguments)
            changes = {
                "arguments": arguments,
                "arguments_hash": decided_hash,
                "lane": lane_of(operation.action, arguments, operation.project_id),
                "gist": parsed.gist(),
                "target": parsed.target(),
            }
    # The policy judges the edited arguments too: an edit can raise the risk and the
    # count (and then the decision waits for more people), never lower them.
    needed = requirement_after_edit(operation, arguments if changes else operation.arguments)
    raised = stricter(operation, needed) if changes else {}
    changes.update(raised)
    required = changes.get("required_approvals", operation.required_approvals)
    # An edit retracts every approval before it, so the count starts again with it.
    approvers = set()
    if not changes:
        approvers = set(
            operation.decisions.counted_approvals()
            .filter(reviewer__isnull=False)
            .values_list("reviewer_id", flat=True)
        )
    if reviewer.pk in approvers:
        raise DecisionRefused(
            "you have already approved these arguments; another reviewer must give "
            "the second approval"
        )
    decision = Decision.objects.create(
        operation=operation,
        reviewer=reviewer,
        kind=kind,
        arguments_hash=decided_hash,
        preview_sha256=seen.artifact.sha256 if seen else "",
        edited_arguments=arguments,
        comment=comment,
    )
    detail = {"decision": _describe(decision, via)}
    if raised:
        # What was raised, not the rule's text: agents read checkpoints, and the rule
        # names its threshold (the operation keeps it for the page).
        detail["requirement"] = {k: v for k, v in raised.items() if k != "approval_rule"}
    if len(approvers) + 1 >= required:
        changes.update(approved_at=now, approval_expires_at=now + needed.approval_ttl)
        transition_operation(
            operation=operation,
            to=Operation.Status.APPROVED,
            actor=actor,
            reason=comment or "approved",
            changes=changes,
            detail=detail,
            artifacts=[seen] if seen else [],
            run=run,
        )
    else:
        transition_operation(
            operation=operation,
            to=Operation.Status.PROPOSED,
            event="operation.edit" if changes else "operation.approval",
            actor=actor,
            reason=(
                f"{len(approvers) + 1} of {required} approvals"
                + (" for the edited arguments" if changes else "")
            ),
            changes=changes,
            detail=detail,
            artifacts=[seen] if seen else [],
            run=run,
        )
    return decision


def _describe(decision: Decision, via: str) -> dict:
    """The decision as its checkpoint keeps it; ``via`` where it was made, if not the
    page (e.g. "slack")."""
    return {
        "id": decision.pk,
        "kind": decision.kind,
        "by": decision.reviewer.get_username()
        if decision.reviewer
        else f"policy:{decision.policy}",
        "arguments_hash": decision.arguments_hash,
        "preview_sha256": decision.preview_sha256,
        "comment": decision.comment,
        **({"via": via} if via else {}),
    }


def expire_if_due(operation: Operation, now: datetime) -> bool:
    """Expire ``operation`` if its decision deadline or its approval has passed.
    Returns whether it is (now) expired. Fail closed: expiry is never a rejection
    by a person; it is recorded as the policy's doing, with its own status.

    Nothing due in the operation as the caller read it means nothing to do, and no run
    lock: every long-poll of the agent API asks, and a reader holding the run lock
    makes a worker skip the run (``SKIP LOCKED``) for that moment. A lapse the caller's
    read cannot show (it was approved since) is left to the expiry sweep; the callers
    check the status again under the lock before acting."""
    if operation.status != Operation.Status.EXPIRED and _lapse_reason(operation, now) is None:
        return False
    with transaction.atomic():
        run = lock_run(operation.run_id)
        current = Operation.objects.get(pk=operation.pk)
        if current.status == Operation.Status.EXPIRED:
            return True
        reason = _lapse_reason(current, now)
        if reason is None:
            return False
        transition_operation(
            operation=current,
            to=Operation.Status.EXPIRED,
            actor=Actor.policy(reason),
            reason=reason,
            changes={"status_reason": reason, "result": {"expired": reason}},
        )
        settle_wait(run, Actor.policy(reason))
        return True


def _lapse_reason(operation: Operation, now: datetime) -> str | None:
    if operation.status == Operation.Status.PROPOSED and operation.expires_at <= now:
        return DECISION_TIMEOUT
    if operation.status == Operation.Status.APPROVED and operation.approval_expires_at <= now:
        return APPROVAL_LAPSED
    return None


def expire_due_operations(now: datetime | None = None) -> int:
    """Expire every operation past its deadline (in the database's time), each in its
    own short transaction."""
    now = now or db_now()
    due = Operation.objects.filter(
        status=Operation.Status.PROPOSED, expires_at__lte=now
    ) | Operation.objects.filter(status=Operation.Status.APPROVED, approval_expires_at__lte=now)
    due = in_key_order(due, "run_id", "status", "expires_at", "approval_expires_at")
    return sum(expire_if_due(operation, now) for operation in due)


def in_key_order(due, *fields: str) -> list:
    """The rows of ``due`` with only ``fields`` read (what says whether each is due; its
    expiry reads the rest under the lock), sorted by key here: asked to sort them,
    SQLite reads the whole table in key order instead of the few due rows from their
    indexes."""
    return sorted(due.only(*fields), key=attrgetter("pk"))
