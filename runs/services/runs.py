"""Sessions, runs and messages: opening, talking, finishing and cancelling."""

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max

from runs.actors import Actor, ActorKind
from runs.errors import InvalidInput, RunClosed, RunNotAccepting, StaleVersion
from runs.models import (
    AgentToken,
    Alert,
    HumanRequest,
    Message,
    Operation,
    Project,
    Run,
    Session,
)
from runs.payloads import CURRENT_VERSION, MessageKind
from runs.permissions import require_project_perm
from runs.transitions import (
    lock_run,
    record_run_created,
    transition_operation,
    transition_request,
    transition_run,
)

AWAITING_DECISION = "a reviewer's decision on every proposed operation"
# What ends a ``request_input`` wait: the session owner's message, not a reviewer.
OWNER_REPLY = "a reply from the session owner"
# How many open requests the run's ``unblock`` names before "and N more".
NAMED_REQUESTS = 5
# Operations whose effect has not fired and never will once their run closes.
NOT_YET_EXECUTED = (Operation.Status.PROPOSED, Operation.Status.APPROVED)
# Oversight's own voice: system messages are written by its workers and policies only.
SYSTEM_AUTHORS = (ActorKind.WORKER, ActorKind.POLICY)


def require_open(run: Run) -> None:
    if run.is_terminal or run.cancel_requested:
        raise RunClosed(f"run {run.pk} is {run.status}; it accepts nothing more")


def require_no_open_alert(run: Run) -> None:
    """An agent may not leave a run an alert halted, by finishing it or retrying it:
    the alert stays open until a person resolves it (an admin may cancel the run)."""
    alert = run.alerts.unresolved().order_by("pk").first()
    if alert is not None:
        raise RunNotAccepting(
            f"run {run.pk} has an open alert ({alert.pk}); a person must resolve it first"
        )


def paused_by_alert(run: Run) -> RunNotAccepting | None:
    """Why ``run`` takes no new proposal or claim when its project sets
    ``alerts_pause_agent``: an alert is open on another run of the same agent. The agent
    is its token (sessions opened before tokens were recorded: its name)."""
    if not run.project.alerts_pause_agent:
        return None
    session = run.session
    same_agent = (
        {"run__session__token_id": session.token_id}
        if session.token_id
        else {"run__session__token__isnull": True, "run__session__agent": session.agent}
    )
    alert = (
        Alert.objects.unresolved()
        .filter(project_id=run.project_id, **same_agent)
        .exclude(run_id=run.pk)
        .order_by("pk")
        .first()
    )
    if alert is None:
        return None
    return RunNotAccepting(
        f"run {run.pk} is paused: run {alert.run_id} of the same agent has an open alert "
        f"({alert.pk}); a person must resolve it first"
    )


def open_session(
    *, project: Project, owner, agent: str, title: str = "", token: AgentToken | None = None
) -> Session:
    """Open a session. ``token`` is the agent token opening it: only that token may act
    on the session and its runs (a session opened without one takes no API calls)."""
    if not agent.strip():
        raise InvalidInput("agent: a session needs the agent's name")
    return Session.objects.create(
        project=project, owner=owner, agent=agent, title=title, token=token
    )


@transaction.atomic
def start_run(*, session: Session, goal: str, actor: Actor, retry_of: Run | None = None) -> Run:
    """Create a run (queued) and start it (running): two checkpoints, one transaction.
    A retry is a new run pointing at a finished one; the old run stays as it ended."""
    if not goal.strip():
        raise InvalidInput("goal: a run needs a goal")
    if retry_of is not None:
        if retry_of.session_id != session.pk:
            raise InvalidInput("retry_of: a retry stays in the session of the run it retries")
        require_no_open_alert(retry_of)
        if not retry_of.is_terminal:
            raise InvalidInput(f"retry_of: run {retry_of.pk} is {retry_of.status}, not finished")
    run = Run.objects.create(
        project_id=session.project_id, session=session, goal=goal, retry_of=retry_of
    )
    record_run_created(run=run, actor=actor)
    transition_run(run=run, to=Run.Status.RUNNING, actor=actor)
    return run


def activate(run: Run, actor: Actor) -> None:
    """An agent acting on a queued run (one whose wait ended) resumes it."""
    if run.status == Run.Status.QUEUED and actor.kind == ActorKind.AGENT:
        transition_run(run=run, to=Run.Status.RUNNING, actor=actor, reason="agent resumed")


@transaction.atomic
def append_message(
    *,
    run: Run,
    kind: str,
    payload: dict,
    actor: Actor,
    schema_version: int = CURRENT_VERSION,
) -> Message:
    """Append a message with the next seq of its run. The seq is assigned under the run
    lock, so concurrent writers get 1, 2, 3… with no gap and no duplicate. The author
    is the actor; only Oversight itself (a worker or a policy) writes ``system``."""
    if kind == MessageKind.SYSTEM and actor.kind not in SYSTEM_AUTHORS:
        raise InvalidInput(
            "kind: system messages are written by Oversight only; send user, agent or tool"
        )
    current = lock_run(run.pk)
    require_open(current)
    seq = (current.messages.aggregate(last=Max("seq"))["last"] or 0) + 1
    try:
        message = Message.objects.create(
            run=current,
            seq=seq,
            kind=kind,
            schema_version=schema_version,
            payload=payload,
            author=actor.label,
            author_kind=actor.kind,
        )
    except ValidationError as exc:
        raise InvalidInput("payload: " + "; ".join(exc.messages)) from None
    activate(current, actor)
    if (
        actor.kind == ActorKind.USER
        and current.status == Run.Status.WAITING
        and current.unblock == OWNER_REPLY
    ):
        transition_run(run=current, to=Run.Status.QUEUED, actor=actor, reason="input received")
    return message


@transaction.atomic
def request_input(*, run: Run, question: str, actor: Actor) -> Message:
    """The agent asks its owner something and waits (needs_input) for a user message."""
    message = append_message(
        run=run, kind=MessageKind.AGENT, payload={"text": question}, actor=actor
    )
    transition_run(
        run=message.run,
        to=Run.Status.WAITING,
        actor=actor,
        reason=Run.Reason.NEEDS_INPUT,
        unblock=OWNER_REPLY,
    )
    return message


@transaction.atomic
def finish_run(
    *,
    run: Run,
    status: str,
    actor: Actor,
    outcome: str = "",
    expected_version: int | None = None,
) -> Run:
    """End a run as completed, partial or failed. Proposals nobody acted on are
    cancelled with it; an operation whose effect is in flight, or whose failed
    verification still awaits its rollback, must settle first."""
    if status not in (Run.Status.COMPLETED, Run.Status.PARTIAL, Run.Status.FAILED):
        raise InvalidInput(f"status: a run finishes as completed, partial or failed, not {status}")
    if status != Run.Status.COMPLETED and not outcome.strip():
        raise InvalidInput(f"outcome: say why the run ended {status}")
    current = lock_run(run.pk)
    require_open(current)
    require_no_open_alert(current)
    if expected_version is not None and current.version != expected_version:
        raise StaleVersion(f"run {run.pk} is at version {current.version}: read it again")
    # Effects that may exist and are not accounted for yet: no run ends over them.
    unsettled = [
        f"{pk} ({status})"
        for pk, status in current.operations.filter(
            status__in=(Operation.Status.IN_FLIGHT, Operation.Status.VERIFY_FAILED)
        )
        .order_by("pk")
        .values_list("pk", "status")
    ]
    if unsettled:
        raise RunNotAccepting(
            f"operations {', '.join(unsettled)} have not settled; wait for their outcome "
            "(or report it and its rollback)"
        )
    cancel_open_operations(current, actor, f"run finished {status}")
    cancel_open_requests(current, actor, f"run finished {status}")
    if status != Run.Status.FAILED and current.status == Run.Status.WAITING:
        settle_wait(current, actor)
    activate(current, actor)
    transition_run(run=current, to=status, actor=actor, outcome=outcome)
    run.refresh_from_db()
    return run


@transaction.atomic
def cancel_run(*, run: Run, actor: Actor, reason: str) -> Run:
    """Cancel a run and, in the same transaction, every operation not yet executed.
    A worker re-checks ``cancel_requested`` before firing an in-flight effect, and any
    later decision or agent message for this run is refused."""
    if not reason.strip():
        raise InvalidInput("reason: say why the run is cancelled")
    if actor.user is not None:
        require_project_perm(actor.user, run.project, "cancel_run")
    current = lock_run(run.pk)
    if current.is_terminal and current.status != Run.Status.CANCELLED:
        raise RunClosed(f"run {current.pk} already ended {current.status}")
    if current.status != Run.Status.CANCELLED:
        cancel_open_operations(current, actor, reason)
        cancel_open_requests(current, actor, reason)
        transition_run(run=current, to=Run.Status.CANCELLED, actor=actor, outcome=reason)
    run.refresh_from_db()
    return run


def cancel_open_operations(run: Run, actor: Actor, reason: str) -> None:
    for operation in run.operations.filter(status__in=NOT_YET_EXECUTED).order_by("pk"):
        transition_operation(
            operation=operation,
            to=Operation.Status.CANCELLED,
            actor=actor,
            reason=reason,
            changes={"status_reason": reason, "result": {"cancelled": reason}},
        )


def cancel_open_requests(run: Run, actor: Actor, reason: str) -> None:
    """Nobody answers a request of a run that ended: each open one is cancelled."""
    for request in run.requests.filter(status=HumanRequest.Status.OPEN).order_by("pk"):
        transition_request(
            request=request, to=HumanRequest.Status.CANCELLED, actor=actor, reason=reason
        )


def awaiting_answers(request_ids: list[int]) -> str:
    """What unblocks a run waiting for answers: ``an answer to request 7``."""
    if len(request_ids) == 1:
        return f"an answer to request {request_ids[0]}"
    named = ", ".join(str(pk) for pk in request_ids[:NAMED_REQUESTS])
    more = len(request_ids) - NAMED_REQUESTS
    return f"answers to requests {named}" + (f" and {more} more" if more > 0 else "")


def settle_wait(run: Run, actor: Actor, *, locked: bool = False) -> None:
    """Make the locked ``run``'s wait match what still waits for a person: open human
    requests first (needs_input, naming them), then proposals (approval); when nothing
    does, the run goes back to the queue. A run waiting for anything else is left
    alone: reconciliation, or the owner's reply to ``request_input``. ``locked`` as
    for ``transition_run``: every transition of the caller's went through ``run``."""
    if run.status != Run.Status.WAITING or run.reason not in (
        Run.Reason.APPROVAL,
        Run.Reason.NEEDS_INPUT,
    ):
        return
    if run.unblock == OWNER_REPLY:
        return
    if waits := awaited(run):
        wait_for(run, *waits, actor, locked=locked)
    else:
        why = (
            "every request has an answer"
            if run.reason == Run.Reason.NEEDS_INPUT
            else "every proposal has a decision"
        )
        transition_run(run=run, to=Run.Status.QUEUED, actor=actor, reason=why, locked=locked)


def awaited(run: Run) -> tuple[str, str] | None:
    """What on ``run`` still waits for a person, as a wait reason and what unblocks
    it: open human requests first (needs_input), then proposals (approval); None if
    nothing does."""
    if open_ids := open_request_ids(run):
        return Run.Reason.NEEDS_INPUT, awaiting_answers(open_ids)
    if run.operations.filter(status=Operation.Status.PROPOSED).exists():
        return Run.Reason.APPROVAL, AWAITING_DECISION
    return None


def open_request_ids(run: Run) -> list[int]:
    return list(
        run.requests.filter(status=HumanRequest.Status.OPEN)
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def wait_for(run: Run, reason: str, unblock: str, actor: Actor, *, locked: bool = False) -> None:
    """Have the locked ``run`` wait for ``reason`` (``unblock`` ending it), unless it
    already does: a checkpoint only when something changes. ``locked`` as for
    ``transition_run``."""
    if (run.status, run.reason, run.unblock) != (Run.Status.WAITING, reason, unblock):
        transition_run(
            run=run,
            to=Run.Status.WAITING,
            actor=actor,
            reason=reason,
            unblock=unblock,
            locked=locked,
        )
