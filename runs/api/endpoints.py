"""The agent API's endpoints. Each finds its objects within the sessions the token
opened and calls the same services the pages use. Another agent's session, run or
operation, in this project or another, is a 404 as if it did not exist: a token must
not propose into, finish or report on runs of someone it does not act for."""

import base64
import binascii
from datetime import datetime, timedelta
from typing import Annotated

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction
from django.http import Http404
from django.shortcuts import get_object_or_404
from ninja import Query, Router, Status

from runs.actions.base import Effect
from runs.actors import Actor
from runs.api import schemas as s
from runs.api.limits import MAX_ROW_ID, LimitExceeded, QueryText, RowId, check_size
from runs.api.waits import long_poll
from runs.canonical import sha256_hex
from runs.clock import db_now
from runs.downloads import download
from runs.engine.claims import LEASED, take_lease
from runs.engine.executor import ROLLBACK_INTENT
from runs.errors import (
    EarlierAttempt,
    IllegalTransition,
    InvalidInput,
    OversightError,
    RunClosed,
    RunNotAccepting,
    StaleVersion,
)
from runs.models import (
    AgentToken,
    Checkpoint,
    CheckpointArtifact,
    Message,
    Operation,
    Run,
    Session,
)
from runs.payloads import SCHEMAS as PAYLOAD_SCHEMAS
from runs.services.alerts import raise_alert
from runs.services.artifacts import attach_artifact
from runs.services.decisions import expire_if_due
from runs.services.identity import found_by_name, named, owned
from runs.services.proposals import submit_proposal, withdraw_operation
from runs.services.runs import (
    append_message,
    finish_run,
    open_session,
    paused_by_alert,
    start_run,
)
from runs.transitions import lock_run, transition_operation

router = Router()
PROBLEMS = {
    400: s.Problem,
    401: s.Problem,
    404: s.Problem,
    409: s.Problem,
    413: s.Problem,
    422: s.Problem,
}


# A lookup's required filter: 422 without it.
ExternalIdQuery = Annotated[QueryText, Query(min_length=1)]


def check_page(after: int, limit: int) -> None:
    """A page of a list: ``limit`` rows (within the server's maximum page) after seq
    ``after`` (a number the database can compare)."""
    if not 0 <= after <= MAX_ROW_ID:
        raise LimitExceeded("after", f"between 0 and {MAX_ROW_ID}")
    if not 1 <= limit <= settings.OVERSIGHT_API_MAX_PAGE:
        raise LimitExceeded("limit", f"between 1 and {settings.OVERSIGHT_API_MAX_PAGE}")


def token(request) -> AgentToken:
    return request.auth


def agent(request) -> Actor:
    return Actor.agent(token(request).name)


def own_session(request, pk: int) -> Session:
    return get_object_or_404(Session, pk=pk, token=token(request))


def own_run(request, pk: int) -> Run:
    return get_object_or_404(Run, pk=pk, session__token=token(request))


def own_operation(request, pk: int) -> Operation:
    return get_object_or_404(
        Operation.objects.select_related("project"), pk=pk, run__session__token=token(request)
    )


# --- sessions and runs ------------------------------------------------------------------


def created(obj_and_new: tuple, out) -> Status:
    """201 for a new object, 200 for the one a repeated create found."""
    obj, new = obj_and_new
    return Status(201 if new else 200, out(obj))


@router.post(
    "/sessions", response={200: s.SessionOut, 201: s.SessionOut, **PROBLEMS}, tags=["runs"]
)
def create_session(request, body: s.SessionIn):
    """Open a session. With an ``external_id`` already naming one of this token's
    sessions with the same title and agent: 200 with it."""
    me = token(request)
    agent_name = body.agent or me.name
    return created(
        named(
            Session,
            project_id=me.project_id,
            token=me,
            external_id=body.external_id,
            describes=lambda found: (found.title, found.agent) == (body.title, agent_name),
            create=lambda: (
                open_session(
                    project=me.project, owner=me.owner, agent=agent_name, title=body.title, token=me
                ),
                True,
            ),
        ),
        s.SessionOut.of,
    )


@router.get("/sessions", response={200: list[s.SessionOut], **PROBLEMS}, tags=["runs"])
def find_sessions(request, external_id: ExternalIdQuery):
    """This token's session of that ``external_id``, if any: a list of 0 or 1."""
    found = found_by_name(Session, token(request), external_id)
    return [s.SessionOut.of(session) for session in found.select_related("project", "owner")]


@router.post("/runs", response={200: s.RunOut, 201: s.RunOut, **PROBLEMS}, tags=["runs"])
def create_run(request, body: s.RunIn):
    """Start a run in a session. With an ``external_id`` already naming one of this
    token's runs with the same session, goal and retry_of: 200 with it."""
    session = own_session(request, body.session)
    retry_of = own_run(request, body.retry_of) if body.retry_of is not None else None
    return created(
        named(
            Run,
            project_id=session.project_id,
            token=token(request),
            external_id=body.external_id,
            describes=lambda found: (
                (found.session_id, found.goal, found.retry_of_id)
                == (session.pk, body.goal, body.retry_of)
            ),
            create=lambda: (
                start_run(session=session, goal=body.goal, actor=agent(request), retry_of=retry_of),
                True,
            ),
        ),
        s.RunOut.of,
    )


@router.get("/runs", response={200: list[s.RunOut], **PROBLEMS}, tags=["runs"])
def find_runs(request, external_id: ExternalIdQuery):
    """This token's run of that ``external_id``, if any: a list of 0 or 1."""
    return [s.RunOut.of(run) for run in found_by_name(Run, token(request), external_id)]


@router.get("/runs/{int:pk}", response={200: s.RunOut, **PROBLEMS}, tags=["runs"])
def read_run(request, pk: int):
    """The run's status, why it waits, its version, pending operations, and which of
    the three recovery cases it is in ("where was I?")."""
    return s.RunOut.of(own_run(request, pk))


@router.post("/runs/{int:pk}/finish", response={200: s.RunOut, **PROBLEMS}, tags=["runs"])
def finish(request, pk: int, body: s.FinishIn):
    run = finish_run(
        run=own_run(request, pk),
        status=body.status,
        actor=agent(request),
        outcome=body.outcome,
        expected_version=body.base_version,
    )
    return s.RunOut.of(run)


@router.post("/runs/{int:pk}/messages", response={201: s.MessageOut, **PROBLEMS}, tags=["runs"])
def add_message(request, pk: int, body: s.MessageIn):
    check_size("payload", body.payload, max_bytes=settings.OVERSIGHT_API_MAX_MESSAGE_BYTES)
    if (body.kind, body.schema_version) not in PAYLOAD_SCHEMAS:
        raise InvalidInput(
            f"schema_version: no payload schema for kind {body.kind!r} "
            f"version {body.schema_version}"
        )
    message = append_message(
        run=own_run(request, pk),
        kind=body.kind,
        payload=body.payload,
        actor=agent(request),
        schema_version=body.schema_version,
    )
    return Status(201, s.MessageOut(seq=message.seq, run_version=message.run.version))


@router.get(
    "/runs/{int:pk}/messages", response={200: list[s.MessageRead], **PROBLEMS}, tags=["runs"]
)
def messages(request, pk: int, after: int = 0, limit: int = 100):
    """The run's messages in order, ``limit`` at a time after seq ``after``: the
    conversation as the reviewers see it, the session owner's replies included."""
    check_page(after, limit)
    rows = Message.objects.filter(run=own_run(request, pk), seq__gt=after).order_by("seq")
    return [
        s.MessageRead(
            seq=m.seq,
            at=m.created_at,
            kind=m.kind,
            author=m.author,
            author_kind=m.author_kind,
            payload=m.payload,
        )
        for m in rows[:limit]
    ]


@router.get(
    "/runs/{int:pk}/checkpoints",
    response={200: list[s.CheckpointOut], **PROBLEMS},
    tags=["audit"],
)
def checkpoints(request, pk: int, after: int = 0, limit: int = 100):
    """The run's checkpoints in order, ``limit`` at a time after seq ``after``."""
    check_page(after, limit)
    rows = Checkpoint.objects.filter(run=own_run(request, pk), seq__gt=after).order_by("seq")
    return [
        s.CheckpointOut(
            seq=c.seq,
            at=c.created_at,
            event=c.event,
            from_status=c.from_status,
            to_status=c.to_status,
            actor_kind=c.actor_kind,
            actor=c.actor_label,
            reason=c.reason,
            operation=c.operation_id,
            state=c.state,
            hash=c.hash,
            prev_hash=c.prev_hash,
        )
        for c in rows[:limit]
    ]


# --- operations -------------------------------------------------------------------------


@router.post(
    "/runs/{int:pk}/operations",
    response={200: s.OperationOut, 201: s.OperationOut, **PROBLEMS},
    tags=["operations"],
)
def propose(request, pk: int, body: s.ProposalIn):
    """Propose an operation. A repeat with the same call_id (or external_id) and
    arguments answers 200 with the existing operation; other arguments, a stale
    base_version, or a closed run answer 409. A registered action's arguments follow
    its schema (``GET /actions``)."""
    check_size("arguments", body.arguments, max_bytes=settings.OVERSIGHT_API_MAX_ARGUMENTS_BYTES)
    proposal = submit_proposal(
        run=own_run(request, pk),
        call_id=body.call_id,
        action=body.action,
        arguments=body.arguments,
        risk=body.risk,
        rollback_kind=body.rollback_kind,
        base_version=body.base_version,
        actor=agent(request),
        token=token(request),
        external_id=body.external_id,
        summary=body.summary,
        rationale=body.rationale,
    )
    return created(proposal, s.OperationOut.of)


@router.get("/operations", response={200: list[s.OperationOut], **PROBLEMS}, tags=["operations"])
def find_operations(
    request,
    external_id: QueryText = "",
    run: RowId | None = None,
    call_id: QueryText = "",
):
    """This token's operation named ``external_id``, or of ``run`` and ``call_id``
    (give one or the other): a list of 0 or 1."""
    if external_id and run is None and not call_id:
        found = found_by_name(Operation, token(request), external_id)
    elif run is not None and call_id and not external_id:
        found = owned(Operation, token(request)).filter(run_id=run, call_id=call_id)
    else:
        raise InvalidInput("external_id: give external_id, or run and call_id")
    return [s.OperationOut.of(operation) for operation in found]


@router.get(
    "/operations/{int:pk}",
    response={200: s.OperationOut, 429: s.Problem, **PROBLEMS},
    tags=["operations"],
)
async def read_operation(request, pk: int, wait: int = 0, version: int | None = None):
    """Read an operation. With ``wait=N`` (seconds, bounded) the answer comes as soon as
    the operation changes from ``version`` (default: the version when asked), or after
    N seconds with the operation as it is. A wait beyond the concurrent waits allowed
    per token or in all is refused at once: 429, with ``Retry-After``."""
    operation = await sync_to_async(_operation_now)(request, pk)
    known = operation.version if version is None else version

    def changed() -> bool:
        operation.refresh_from_db()
        return operation.version != known

    watched = ("operation", operation.pk, operation.version)
    refusal = await long_poll(token(request).pk, wait, changed, watched)
    return refusal or await sync_to_async(s.OperationOut.of)(operation)


def _operation_now(request, pk: int) -> Operation:
    operation = own_operation(request, pk)
    expire_if_due(operation, db_now())
    return operation


@router.post(
    "/operations/{int:pk}/withdraw",
    response={200: s.OperationOut, **PROBLEMS},
    tags=["operations"],
)
def withdraw(request, pk: int, body: s.WithdrawIn):
    """Take back a proposal that has not fired: a proposed or approved operation is
    cancelled, and the run's wait settles as after a decision. Already cancelled: 200
    as it is. Claimed, executing or ended otherwise: 409 (the detail names its
    status); wait for its outcome instead."""
    operation = withdraw_operation(
        operation=own_operation(request, pk), actor=agent(request), reason=body.reason
    )
    return s.OperationOut.of(operation)


# --- operations the agent executes itself -----------------------------------------------


def _agent_executed(request, pk: int) -> Operation:
    operation = own_operation(request, pk)
    if operation.executor != Operation.Executor.AGENT:
        raise InvalidInput("operation: this one is executed by Oversight's workers")
    return operation


def _fenced(operation: Operation, epoch: int, status: str, now: datetime | None = None) -> None:
    """Refuse a step unless ``epoch`` still holds the operation in ``status`` and, given
    ``now`` (the database's), its lease is live. Read under the run lock: every writer
    of the operation takes it, so the check holds until the caller's write."""
    if operation.fencing_epoch != epoch or operation.status != status:
        raise StaleVersion(
            f"operation {operation.pk} is {operation.status} at epoch {operation.fencing_epoch}; "
            f"epoch {epoch} no longer holds it"
        )
    expires = operation.lease_expires_at
    if now is not None and (expires is None or expires <= now):
        raise StaleVersion(
            f"operation {operation.pk}: the lease of epoch {epoch} lapsed; claim it again "
            "and verify before doing anything"
        )


INTENT = "operation.intent"


def _intent_epochs(operation: Operation, event: str = INTENT) -> set:
    """The epochs that recorded ``event`` (the intent of the effect or of its rollback)
    on the operation; None for an intent recorded before intents named their epoch."""
    found = operation.checkpoints.filter(event=event)
    return set(found.values_list("state__attempt__epoch", flat=True))


def _no_earlier_attempt(operation: Operation, event: str, body: s.IntentIn) -> None:
    """Refuse to take a step again that another epoch recorded its intent to take: its
    lease lapsed, but that executor may be alive and still taking it (a paused process,
    a slow call), so a repeat is harmless only where the target deduplicates on the
    idempotency key. Otherwise the step's outcome is uncertain and a person decides, as
    for the workers (``Execution._may_carry_on``, ``_resume_rollback``)."""
    if body.deduplicates or not _intent_epochs(operation, event) - {body.epoch}:
        return
    step, then = (
        ("roll it back", "Ask for an alert (rollback outcome alert)")
        if event == ROLLBACK_INTENT
        else ("fire its effect", "Report the effect uncertain, then ask for an alert")
    )
    raise EarlierAttempt(
        f"operation {operation.pk}: an earlier executor recorded its intent to {step} and "
        "may still be doing so; the target does not deduplicate on the idempotency key "
        f"(deduplicates: false), so doing it again could do it twice. {then}: a person "
        "decides"
    )


def _not_accepting(run: Run) -> OversightError | None:
    """Why ``run`` takes no new execution step (a claim, an intent), if it does not:
    closed, halted for reconciliation, or paused by an alert on another of the agent's
    runs (the project's ``alerts_pause_agent``)."""
    if run.cancel_requested:
        return RunClosed(f"run {run.pk} is cancelled")
    if run.is_terminal:
        return RunClosed(f"run {run.pk} is {run.status}; it accepts nothing more")
    if run.reason == Run.Reason.RECONCILIATION:
        return RunNotAccepting(f"run {run.pk} is halted for reconciliation: {run.unblock}")
    return paused_by_alert(run)


@router.post(
    "/operations/{int:pk}/claim", response={200: s.ClaimOut, **PROBLEMS}, tags=["execution"]
)
def claim(request, pk: int, body: s.ClaimIn):
    """Take an approved agent-executed operation with a lease and a new fencing epoch.
    A second claim while the lease holds is a 409; after it expires, a claim takes over
    (and ``intent`` says an earlier executor may have fired the effect: verify first).
    A cancelled run (409 run_closed) or one halted for reconciliation (409
    run_not_accepting) takes no claim, not even a takeover. Lease times are the
    database's."""
    operation = _agent_executed(request, pk)
    if expire_if_due(operation, db_now()):
        raise RunClosed(f"operation {pk} expired before it was claimed")
    with transaction.atomic():
        run = lock_run(operation.run_id)
        operation.refresh_from_db()
        if refusal := _not_accepting(run):
            raise refusal
        now = db_now()
        held = operation.lease_expires_at and operation.lease_expires_at > now
        if operation.status != Operation.Status.APPROVED and (
            operation.status not in LEASED or held
        ):
            raise StaleVersion(f"operation {pk} is {operation.status} and cannot be claimed now")
        expires = now + timedelta(seconds=body.lease_seconds)
        executor = body.executor or token(request).name
        epoch = take_lease(
            operation,
            run=run,
            owner=executor,
            until=expires,
            actor=agent(request),
            reason=f"claimed by {executor}",
        )
    return s.ClaimOut(
        operation=operation.pk,
        status=operation.status,
        epoch=epoch,
        lease_expires_at=expires,
        lease_seconds=body.lease_seconds,
        idempotency_key=operation.idempotency_key,
        arguments=operation.arguments,
        intent=operation.intent,
    )


@router.post(
    "/operations/{int:pk}/heartbeat",
    response={200: s.LeaseOut, **PROBLEMS},
    tags=["execution"],
)
def heartbeat(request, pk: int, body: s.HeartbeatIn):
    """Renew ``epoch``'s lease for ``lease_seconds`` from now (the database's time) while
    the agent's function or undo runs; every third of the lease is usual. Only while that
    epoch holds the operation (in flight or awaiting its rollback) and its lease has not
    lapsed: otherwise 409, and the executor has lost it. Another may take over and verify
    first; the one that lost it records nothing more. A renewal is no checkpoint, as a
    worker's is not: the lease is not part of the audit trail, its claims are."""
    operation = _agent_executed(request, pk)
    with transaction.atomic():
        lock_run(operation.run_id)
        operation.refresh_from_db()
        now = db_now()
        held = operation.status if operation.status in LEASED else Operation.Status.IN_FLIGHT
        _fenced(operation, body.epoch, held, now)
        expires = now + timedelta(seconds=body.lease_seconds)
        Operation.objects.filter(pk=pk).update(lease_expires_at=expires)
    return s.LeaseOut(owner=operation.lease_owner, epoch=body.epoch, expires_at=expires)


@router.post(
    "/operations/{int:pk}/intent", response={200: s.OperationOut, **PROBLEMS}, tags=["execution"]
)
def intent(request, pk: int, body: s.IntentIn):
    """Record the step about to be taken, before it is taken, while this epoch's lease is
    live: in flight, the effect (``snapshot`` is what undo needs: the operation's
    intent); awaiting its rollback (verify_failed), the undo or compensation.

    If another epoch recorded its intent of the same step, its executor may still be
    taking it: the step is taken again only where the target deduplicates on the
    idempotency key (``deduplicates``); otherwise 409 earlier_attempt, and the effect is
    uncertain: report it so and ask for an alert. The effect's intent is refused once the
    run is cancelled (an operation with no intent yet is cancelled with it: it never
    fired) or halted for reconciliation; a rollback's is not: the undo is still due."""
    check_size("snapshot", body.snapshot, max_bytes=settings.OVERSIGHT_API_MAX_ARGUMENTS_BYTES)
    operation = _agent_executed(request, pk)
    with transaction.atomic():
        run = lock_run(operation.run_id)
        operation.refresh_from_db()
        if operation.status == Operation.Status.VERIFY_FAILED:
            _fenced(operation, body.epoch, Operation.Status.VERIFY_FAILED, db_now())
            _no_earlier_attempt(operation, ROLLBACK_INTENT, body)
            _record_intent(operation, run, agent(request), body, ROLLBACK_INTENT)
            return s.OperationOut.of(operation)
        _fenced(operation, body.epoch, Operation.Status.IN_FLIGHT, db_now())
        if operation.intent is not None:
            _no_earlier_attempt(operation, INTENT, body)
        refusal = _not_accepting(run)
        if refusal is None:
            _record_intent(operation, run, agent(request), body, INTENT)
        elif run.cancel_requested and operation.intent is None:
            _cancel_unfired(operation, agent(request))
    if refusal is not None:
        raise refusal  # After the block: the cancellation above is kept.
    return s.OperationOut.of(operation)


def _record_intent(
    operation: Operation, run: Run, actor: Actor, body: s.IntentIn, event: str
) -> None:
    """The intent's checkpoint: the effect's, which keeps ``snapshot`` as the operation's
    intent, or its rollback's. It names the epoch whose intent it is (what a takeover's
    intent is checked against) and what that executor declared of the target."""
    rollback = event == ROLLBACK_INTENT
    attempt = {"epoch": body.epoch, "number": operation.attempts}
    transition_operation(
        operation=operation,
        run=run,
        to=operation.status,
        event=event,
        actor=actor,
        reason="rolling back" if rollback else "executing",
        changes={} if rollback else {"intent": body.snapshot},
        detail={"attempt": attempt, "deduplicates": body.deduplicates}
        | ({"rollback": body.snapshot} if rollback else {}),
    )


def _cancel_unfired(operation: Operation, actor: Actor) -> None:
    why = "run cancelled before the effect fired"
    transition_operation(
        operation=operation,
        to=Operation.Status.CANCELLED,
        actor=actor,
        reason=why,
        changes={"status_reason": why, "result": {"cancelled": why}, "lease_expires_at": None},
    )


REPORTED = {
    "applied": Operation.Status.COMMITTED,
    "absent": Operation.Status.FAILED,
    "uncertain": Operation.Status.VERIFY_FAILED,
}


def _reported_reason(effect: str, error: str) -> str:
    if effect == "applied":
        return "executed and verified by the agent"
    if effect == "absent":
        return f"the effect did not happen: {error}" if error else "the effect did not happen"
    return error or "not verified"


@router.post(
    "/operations/{int:pk}/report", response={200: s.OperationOut, **PROBLEMS}, tags=["execution"]
)
def report(request, pk: int, body: s.ReportIn):
    """Report what verification showed, from the epoch holding a live lease, after its
    intent was recorded (a report with no intent is a 409: the effect must not fire
    before its intent). ``applied`` is committed; ``absent`` ends the operation failed
    (the effect did not happen: nothing to roll back); ``uncertain`` is a verification
    failure, and the rollback plan must follow. A report is the truth about an effect
    that may already have fired, so it is accepted even after the run was cancelled or
    halted for reconciliation: its intent was recorded before."""
    check_size("output", body.output, max_bytes=settings.OVERSIGHT_API_MAX_ARGUMENTS_BYTES)
    operation = _agent_executed(request, pk)
    effect = body.reported_effect()
    with transaction.atomic():
        lock_run(operation.run_id)
        operation.refresh_from_db()
        _fenced(operation, body.epoch, Operation.Status.IN_FLIGHT, db_now())
        if operation.intent is None:
            raise IllegalTransition(
                f"operation {pk} has no intent recorded: the intent comes before the effect"
            )
        if effect == "absent" and _intent_epochs(operation) - {body.epoch}:
            raise EarlierAttempt(
                f"operation {pk}: an earlier executor recorded its intent to fire the effect, "
                "which may still land: absent now does not mean it never happens. Report the "
                "effect uncertain, then ask for an alert: a person decides"
            )
        to, why = REPORTED[effect], _reported_reason(effect, body.error)
        observation = Effect(effect).observation(output=body.output, error=body.error)
        changes = {"result": observation, "status_reason": why}
        if to != Operation.Status.VERIFY_FAILED:
            changes["lease_expires_at"] = None  # Nothing left to do under it.
        transition_operation(
            operation=operation,
            to=to,
            actor=agent(request),
            reason=why,
            changes=changes,
            detail={"observation": observation},
        )
    return s.OperationOut.of(operation)


@router.post(
    "/operations/{int:pk}/rollback",
    response={200: s.OperationOut, **PROBLEMS},
    tags=["execution"],
)
def rollback(request, pk: int, body: s.RollbackIn):
    """After a verification failure: report the undo or compensation done, or ask for
    an out-of-band alert (which halts the run until a person resolves it). Accepted
    from the epoch that holds the operation, also after the run was cancelled or
    halted and after its lease lapsed (the undo is done; it must be recorded), until a
    takeover or the sweep for lapsed agent leases settles the operation."""
    operation = _agent_executed(request, pk)
    with transaction.atomic():
        lock_run(operation.run_id)
        operation.refresh_from_db()
        _fenced(operation, body.epoch, Operation.Status.VERIFY_FAILED)
        if body.outcome == "alert":
            raise_alert(
                operation=operation,
                actor=agent(request),
                summary=body.detail or "the agent could not verify or undo its effect",
                state_left={"arguments": operation.arguments, "intent": operation.intent},
            )
        else:
            transition_operation(
                operation=operation,
                to=body.outcome,
                actor=agent(request),
                reason=body.detail or body.outcome,
                changes={"lease_expires_at": None},
            )
    operation.refresh_from_db()
    return s.OperationOut.of(operation)


# --- artifacts --------------------------------------------------------------------------


@router.post(
    "/runs/{int:pk}/artifacts", response={201: s.ArtifactOut, **PROBLEMS}, tags=["artifacts"]
)
def upload_artifact(request, pk: int, body: s.ArtifactIn):
    run = own_run(request, pk)
    try:
        content = base64.b64decode(body.content_base64, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput("content_base64: not valid base64") from None
    if len(content) > settings.OVERSIGHT_ARTIFACT_MAX_BYTES:
        raise LimitExceeded(
            "content_base64",
            f"{len(content)} bytes is over {settings.OVERSIGHT_ARTIFACT_MAX_BYTES}",
            status=413,
        )
    if sha256_hex(content) != body.sha256:
        raise InvalidInput("sha256: does not match the uploaded bytes")
    artifact = attach_artifact(
        run=run, name=body.name, content=content, actor=agent(request), media_type=body.media_type
    )
    run.refresh_from_db()
    return Status(
        201,
        s.ArtifactOut(
            name=body.name,
            sha256=artifact.sha256,
            size=artifact.size,
            media_type=body.media_type,
            run_version=run.version,
        ),
    )


@router.get("/artifacts/{sha256}", response={200: None, **PROBLEMS}, tags=["artifacts"])
def fetch_artifact(request, sha256: str):
    """The bytes of an artifact a checkpoint of this token's runs references, as an
    attachment named and typed as it last gave them (a type a browser would run, such
    as HTML or SVG, is served as ``application/octet-stream``)."""
    reference = (
        CheckpointArtifact.objects.select_related("artifact")
        .filter(artifact__sha256=sha256, checkpoint__run__session__token=token(request))
        .order_by("-pk")
        .first()
    )
    if reference is None:
        raise Http404("no artifact of your runs has that sha256")
    return download(reference)
