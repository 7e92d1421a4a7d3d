"""Requeuing an operation after a fix: an operation whose effect did not happen (the
target refused it or it was given up before its intent, its precondition failed, or
its decision or approval lapsed) is proposed again in its run, by an operator who says
what was fixed, with the arguments it was approved with. Reviewers decide on it as on
any proposal, at least one person whatever the policy (``policies.REQUEUED``), and
never the operator who requeued it (``runs.permissions.own_interest``). It is refused
once the same was proposed again in the run (the agent's own retry): two approvals
would make the effect twice. The operation requeued stays as it ended: what its agent
was told stays true, and the run's messages tell the agent of the new one."""

from django.db import transaction

from runs.actions.registry import get_action
from runs.actors import Actor
from runs.errors import IllegalTransition, InvalidInput, OversightError
from runs.models import Operation, Run
from runs.payloads import MessageKind
from runs.permissions import require_project_perm
from runs.services.proposals import REQUEUE_CALL, check_accepting, submit_proposal
from runs.services.repeats import same_calls
from runs.services.runs import append_message
from runs.transitions import lock_run

Status = Operation.Status
# Ended without the effect, and not by anyone's decision against it.
REQUEUABLE = (Status.FAILED, Status.PRECONDITION_FAILED, Status.EXPIRED)
# A later operation so ended is no second effect to fear.
NOT_AGAIN = (*REQUEUABLE, Status.REJECTED, Status.CANCELLED)


def call_id_of_requeue(operation: Operation) -> str:
    """The call of ``operation``'s requeue in its run: unique there, so one requeue
    each, and a name no agent may give a call (``proposals.REQUEUE_CALL``)."""
    return f"{REQUEUE_CALL}{operation.pk}"


def why_not_requeuable(operation: Operation, run: Run | None = None) -> str | None:
    """Why ``operation`` cannot be requeued now, if so: its effect happened or may
    have, an agent carries it out, its action is gone, its run (``run``, locked, if
    given) takes no proposal, or the agent already proposed the same again (two
    approvals would make it twice)."""
    if operation.status not in REQUEUABLE:
        status = operation.get_status_display().lower()
        return (
            f"operation {operation.pk} is {status}: only an operation whose effect did not "
            "happen (failed, precondition failed or expired) is requeued"
        )
    if operation.executor != Operation.Executor.SERVER:
        return f"operation {operation.pk} is carried out by its agent, which proposes it again"
    if get_action(operation.action) is None:
        return f"no registered action is named {operation.action!r} any more"
    try:
        check_accepting(run or operation.run)
    except OversightError as refusal:
        return str(refusal)
    if again := _proposed_again(operation):
        return (
            f"the same was proposed again in its run, as operation {again.pk} "
            f"({again.get_status_display().lower()}): a requeue would make it twice"
        )
    return None


def _proposed_again(operation: Operation) -> Operation | None:
    """A later operation of the run that makes the same call and has not ended without
    its effect (a retry of the agent's own, or a requeue)."""
    later = same_calls(operation).filter(pk__gt=operation.pk).exclude(status__in=NOT_AGAIN)
    return later.only("pk", "status").order_by("pk").first()


def requeued_as(operation: Operation) -> Operation | None:
    """``operation``'s requeue, if it was requeued (found by its call, through the
    run's unique index on calls)."""
    call = call_id_of_requeue(operation)
    return Operation.objects.filter(run_id=operation.run_id, call_id=call).first()


@transaction.atomic
def requeue_operation(*, operation: Operation, user, reason: str) -> tuple[Operation, bool]:
    """Propose ``operation`` again; returns the requeue and whether it is new (a second
    requeue of the same operation returns the first). Under the run's lock, with no
    requeue found and its call a name no agent may take, the proposal is a new one."""
    if not reason.strip():
        raise InvalidInput("reason: say what was fixed")
    require_project_perm(user, operation.project, "requeue_operation")
    run = lock_run(operation.run_id)
    operation.refresh_from_db()
    if (already := requeued_as(operation)) is not None:
        return already, False
    if why := why_not_requeuable(operation, run):
        raise IllegalTransition(why)
    actor = Actor.of_user(user)
    requeue, _ = submit_proposal(
        run=run,
        call_id=call_id_of_requeue(operation),
        action=operation.action,
        arguments=operation.arguments,
        risk=operation.proposed_risk,
        rollback_kind=operation.rollback_kind,
        base_version=run.version,
        actor=actor,
        token=operation.proposed_by_token,
        summary=operation.summary,
        rationale=operation.rationale,
        requeue_of=operation,
        requeued_by=user,
        requeue_reason=reason,
    )
    append_message(  # The operator tells the agent, in the run's conversation.
        run=run,
        kind=MessageKind.USER,
        payload={
            "text": f"Operation {operation.pk} ({operation.action}) was requeued by "
            f"{user.get_username()} as operation {requeue.pk}: {reason}"
        },
        actor=actor,
    )
    return requeue, True
