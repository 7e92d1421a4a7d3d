"""The one place where runs, operations and alerts change status.

Every change here (runs, operations, human requests, alerts), in one short transaction:
1. locks the run row (``SELECT … FOR UPDATE`` on PostgreSQL; on SQLite the whole
   transaction already holds the write lock from ``BEGIN IMMEDIATE``), so the
   run's checkpoints are written one at a time and chain correctly;
2. checks the transition against the machine in ``runs.machines``;
3. updates the row only if its ``version`` is still the one the caller read, so a
   stale writer gets ``StaleVersion`` instead of silently overwriting;
4. bumps the run's version and appends the checkpoint whose ``seq`` is that version,
   and, for a run opened with an agent token, the entry of that token's feed.

Callers pass the instance they hold; it is refreshed in place on success. A caller of
``transition_operation`` or ``record_operation_proposed`` that passes the run it locked
(``run=``), or of ``transition_run`` that says the run it passes is the one it locked
and wrote through (``locked=True``), makes the change part of its own atomic block,
with no savepoint: if the change fails, that block (the caller's transaction, or its
savepoint) rolls back whole (Django refuses any further query in it), and the hot path
spares two statements per change.
"""

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from runs import machines, statements
from runs.actors import Actor
from runs.chain import GENESIS, checkpoint_hash
from runs.errors import StaleVersion
from runs.models import (
    AgentToken,
    Alert,
    Artifact,
    Checkpoint,
    CheckpointArtifact,
    Decision,
    FeedEvent,
    HumanRequest,
    Operation,
    Run,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ArtifactRef:
    """A named version of an artifact that a checkpoint introduces (e.g. "app.py")."""

    name: str
    artifact: Artifact
    media_type: str = "application/octet-stream"


def lock_run(run_id: int) -> Run:
    """Lock and return the run, with the token whose feed numbers its checkpoints
    (``feed_token_id``, read in the same query); the caller must be inside
    ``transaction.atomic``. Only the run's row is locked, not its session's. A caller
    that goes on to record a transition passes the run it got (``run=`` of
    ``transition_operation``, ``locked=True`` of ``transition_run``), so the row is read
    and locked once per transaction."""
    run = _LOCK.first(pk=run_id)
    if run is None:
        raise Run.DoesNotExist(f"there is no run {run_id}")
    return run


def try_lock_run(run_id: int) -> Run | None:
    """``lock_run``, or None at once if another transaction holds the run (PostgreSQL's
    ``SKIP LOCKED``; on SQLite the immediate transaction already holds every row)."""
    return _TRY_LOCK.first(pk=run_id)


def _lockable(pk: int, skip_locked: bool = False):
    runs = Run.objects.filter(pk=pk).select_for_update(of=("self",), skip_locked=skip_locked)
    return runs.annotate(feed_token_id=F("session__token_id"))[:1]


_LOCK = statements.Prepared(_lockable, pk=int)
_TRY_LOCK = statements.Prepared(
    lambda pk: _lockable(pk, connection.features.has_select_for_update_skip_locked), pk=int
)


def transition_run(
    *,
    run: Run,
    to: str,
    actor: Actor,
    reason: str = "",
    unblock: str = "",
    outcome: str = "",
    detail: dict | None = None,
    expected_version: int | None = None,
    locked: bool = False,
) -> Checkpoint:
    """Move ``run`` to status ``to``.

    For waiting, ``reason`` is the wait reason (``Run.Reason``) and ``unblock`` says
    what ends the wait; for other statuses ``reason`` is only the checkpoint's text.
    ``outcome`` says why a run ended. ``expected_version`` is the version the caller's
    decision was based on (what an agent or a person read); if the run has moved past
    it, nothing is written and ``StaleVersion`` is raised. ``locked``: ``run`` is the
    instance ``lock_run`` returned earlier in the caller's transaction, and every
    transition since went through it; it is written through as it is, without a
    savepoint or reading the run again (so an error here spoils the caller's
    transaction, which must then roll back).
    """
    with transaction.atomic(savepoint=not locked):
        current = run if locked else lock_run(run.pk)
        if expected_version is not None and current.version != expected_version:
            raise StaleVersion(
                f"run {run.pk} is at version {current.version}, not {expected_version}: "
                "read it again"
            )
        machines.RUN.check(current.status, to)
        waiting = to == Run.Status.WAITING
        changes = {
            "status": to,
            "reason": reason if waiting else "",
            "unblock": unblock if waiting else "",
        }
        if outcome or machines.RUN.is_terminal(to):
            changes["outcome"] = outcome
        if to == Run.Status.CANCELLED:
            changes["cancel_requested"] = True
        checkpoint = _append(
            current,
            changes,
            actor=actor,
            event="run.status",
            from_status=current.status,
            to_status=to,
            reason=reason or outcome,
            detail=detail,
        )
    if not locked:
        _refresh(run, {**changes, "version": current.version, "head": current.head})
    return checkpoint


def transition_operation(
    *,
    operation: Operation,
    to: str,
    actor: Actor,
    reason: str = "",
    event: str = "operation.status",
    changes: dict | None = None,
    detail: dict | None = None,
    artifacts: Sequence[ArtifactRef] = (),
    run: Run | None = None,
) -> Checkpoint:
    """Move ``operation`` to status ``to`` (or record ``event`` on it when ``to`` is its
    current status), applying ``changes`` to its row in the same conditional update.
    ``run`` is the operation's run as ``lock_run`` returned it earlier in the caller's
    transaction, if the caller holds its lock already."""
    with transaction.atomic(savepoint=run is None):
        run = run or lock_run(operation.run_id)
        if to != operation.status:
            machines.OPERATION.check(operation.status, to)
        from_status = _update_versioned(operation, "operation", {"status": to, **(changes or {})})
        if to == Operation.Status.APPROVED and operation.executor == Operation.Executor.SERVER:
            _announce_work()
        return _append(
            run,
            {},
            actor=actor,
            event=event,
            from_status=from_status,
            to_status=to,
            reason=reason,
            operation=operation,
            changed=operation,
            detail=detail,
            artifacts=artifacts,
        )


@transaction.atomic
def transition_alert(
    *, alert: Alert, to: str, actor: Actor, reason: str, changes: dict | None = None
) -> Checkpoint:
    run = lock_run(alert.run_id)
    machines.ALERT.check(alert.status, to)
    fields = {"status": to, **(changes or {})}
    if Alert.objects.filter(pk=alert.pk, status=alert.status).update(**fields) != 1:
        raise StaleVersion(f"alert {alert.pk} changed since you read it: read it again")
    from_status = alert.status
    _refresh(alert, fields)
    return _append(
        run,
        {},
        actor=actor,
        event="alert.status",
        from_status=from_status,
        to_status=to,
        reason=reason,
        operation=alert.operation,
        detail={"alert": alert.pk},
    )


@transaction.atomic
def transition_request(
    *,
    request: HumanRequest,
    to: str,
    actor: Actor,
    reason: str = "",
    changes: dict | None = None,
    detail: dict | None = None,
) -> Checkpoint:
    """Move a human request to status ``to``, applying ``changes`` in the same
    conditional update (on its ``version``); a stale caller gets ``StaleVersion``."""
    run = lock_run(request.run_id)
    machines.REQUEST.check(request.status, to)
    from_status = _update_versioned(request, "request", {"status": to, **(changes or {})})
    return _append(
        run,
        {},
        actor=actor,
        event="request.status",
        from_status=from_status,
        to_status=to,
        reason=reason,
        request=request,
        detail=detail,
    )


@transaction.atomic
def record_request_created(*, request: HumanRequest, actor: Actor) -> Checkpoint:
    """The checkpoint that fixes what was asked, before anyone answers."""
    run = lock_run(request.run_id)
    return _append(
        run,
        {},
        actor=actor,
        event="request.created",
        from_status="",
        to_status=request.status,
        request=request,
        detail={
            "request": {
                "prompt": request.prompt,
                "kind": request.kind,
                "context": request.context,
                "answer_schema": request.answer_schema,
                "choices": request.choices,
                "external_id": request.external_id,
                "expires_at": request.expires_at.isoformat(),
            }
        },
    )


@transaction.atomic
def record_run_event(
    *,
    run: Run,
    actor: Actor,
    event: str,
    reason: str = "",
    detail: dict | None = None,
    artifacts: Sequence[ArtifactRef] = (),
) -> Checkpoint:
    """A checkpoint for something that happened to a run without a status change
    (an artifact attached, a note). It still advances the run's version."""
    current = lock_run(run.pk)
    checkpoint = _append(
        current,
        {},
        actor=actor,
        event=event,
        from_status=current.status,
        to_status=current.status,
        reason=reason,
        detail=detail,
        artifacts=artifacts,
    )
    run.version, run.head = current.version, current.head
    return checkpoint


def _append(
    run: Run,
    changes: dict,
    *,
    actor: Actor,
    event: str,
    from_status: str,
    to_status: str,
    reason: str = "",
    operation: Operation | None = None,
    changed: Operation | None = None,
    request: HumanRequest | None = None,
    detail: dict | None = None,
    artifacts: Sequence[ArtifactRef] = (),
) -> Checkpoint:
    """Bump the locked run's version (applying ``changes``) and append its checkpoint,
    and its entry in the feed of the token that opened the run's session. ``changed``
    is the operation whose row this step changed (refreshed in place), if any."""
    seq = run.version + 1
    updated = statements.update(
        Run,
        {"id": run.pk, "version": run.version},
        {"version": seq, "updated_at": timezone.now(), **changes},
    )
    # Only possible if the caller did not hold the run lock, or wrote through another
    # instance of the run since it locked this one (``locked=True`` misused).
    if updated != 1:
        raise StaleVersion(f"run {run.pk} moved past version {run.version} during the write")
    for field, value in changes.items():
        setattr(run, field, value)
    run.version = seq
    head = getattr(run, "head", None)
    if head is not None and head.seq == seq - 1:
        prev_hash, prev_state = head.hash, head.state
    else:  # Not written through this instance.
        found = _HEAD.rows(run=run.pk)
        prev_hash, prev_state = found[0] if found else (GENESIS, {})
    checkpoint = Checkpoint(
        run=run,
        project_id=run.project_id,
        seq=seq,
        actor_kind=actor.kind,
        actor_user=actor.user,
        actor_label=actor.label,
        operation=operation,
        request=request,
        event=event,
        from_status=from_status,
        to_status=to_status,
        reason=reason,
        state=_state(run, prev_state, changed, from_status, detail, artifacts),
        prev_hash=prev_hash,
    )
    checkpoint.hash = checkpoint_hash(checkpoint)
    statements.insert(checkpoint)
    # The next checkpoint written through this instance (which holds the run's lock, in
    # this transaction) chains to this one without reading it back.
    run.head = checkpoint
    if artifacts:
        CheckpointArtifact.objects.bulk_create(
            CheckpointArtifact(
                checkpoint=checkpoint,
                artifact=ref.artifact,
                name=ref.name,
                media_type=ref.media_type,
            )
            for ref in artifacts
        )
    _feed(run, checkpoint)
    transaction.on_commit(lambda: _logged(checkpoint))
    return checkpoint


# The hash and state of a run's last checkpoint, which the next one chains to.
_HEAD = statements.Prepared(
    lambda run: (
        Checkpoint.objects.filter(run=run).order_by("-seq").values_list("hash", "state")[:1]
    ),
    run=int,
)


def _logged(checkpoint: Checkpoint) -> None:
    """A line in the server log for each state change committed: ids, the event and the
    statuses (never the reason, the state or any argument: they are the run's data)."""
    log.info(
        "%s: %s -> %s",
        checkpoint.event,
        checkpoint.from_status,
        checkpoint.to_status,
        extra={
            "run_id": checkpoint.run_id,
            "operation_id": checkpoint.operation_id,
            "checkpoint_id": checkpoint.pk,
            "event": checkpoint.event,
        },
    )


# Idle workers LISTEN here on PostgreSQL (runs.engine.wakeup).
WORK_CHANNEL = "oversight_work"


def _announce_work() -> None:
    """Wake the idle workers when this transaction commits (PostgreSQL delivers a
    notification then, and only then); SQLite's workers see the commit itself."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, '')", [WORK_CHANNEL])


FEED_NEXT = "UPDATE {table} SET feed_seq = feed_seq + 1 WHERE id = %s RETURNING feed_seq"


def _feed(run: Run, checkpoint: Checkpoint) -> None:
    """Put ``checkpoint`` in its token's feed (``runs.models.FeedEvent``). On SQLite,
    which writes one transaction at a time, it is numbered here: the token's counter
    is held no longer than the database already is. Elsewhere a reader numbers it once
    it has committed, so that nothing the token's other runs share stays locked until
    this transaction ends."""
    token_id = run.feed_token_id
    if token_id is None:
        return
    seq = None
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:  # One statement: SQLite has RETURNING.
            table = connection.ops.quote_name(AgentToken._meta.db_table)
            cursor.execute(FEED_NEXT.format(table=table), [token_id])
            (seq,) = cursor.fetchone()
    statements.insert(FeedEvent(token_id=token_id, seq=seq, checkpoint=checkpoint))


def _state(
    run: Run,
    previous: dict,
    changed: Operation | None,
    from_status: str,
    detail: dict | None,
    artifacts: Sequence[ArtifactRef],
) -> dict:
    """The state needed to continue (seed 000): the run's own fields, the operations
    not yet finished with the approvals that count for their current arguments, every
    artifact version seen so far, and whatever this step decided or observed. Carried
    forward from the previous checkpoint: only ``changed`` can differ from it, since
    every change to an operation is a checkpoint of its own (``check_invariants``
    compares the latest state with the operations)."""
    artifact_versions = dict(previous.get("artifacts", {}))
    for ref in artifacts:
        artifact_versions[ref.name] = {"sha256": ref.artifact.sha256, "size": ref.artifact.size}
    state = {
        "run": {
            "status": run.status,
            "reason": run.reason,
            "unblock": run.unblock,
            "outcome": run.outcome,
            "cancel_requested": run.cancel_requested,
            "version": run.version,
        },
        "pending_operations": _pending(
            previous.get("pending_operations", []), changed, from_status
        ),
        "artifacts": artifact_versions,
    }
    state.update(detail or {})
    return state


# What a state says of each unfinished operation, besides who approved it.
PENDING_FIELDS = ("id", "call_id", "action", "status", "arguments_hash", "idempotency_key")


def _pending(previous: list[dict], changed: Operation | None, from_status: str) -> list[dict]:
    """The unfinished operations of the previous state, with ``changed`` as it is now.
    Its approvals are counted again only when it was open to decisions (proposed): a
    decision on it is recorded with its own transition, and only then."""
    if changed is None:
        return previous
    others = [op for op in previous if op["id"] != changed.pk]
    if changed.status in machines.OPERATION.terminal:
        return others
    carried = next((op for op in previous if op["id"] == changed.pk), None)
    if from_status == "":  # Just proposed: nobody can have decided on it yet.
        approved_by = []
    elif carried is None or from_status == Operation.Status.PROPOSED:
        approved_by = _approvals_of(changed)
    else:
        approved_by = carried["approved_by"]
    entry = {
        **{field: getattr(changed, field) for field in PENDING_FIELDS},
        "approved_by": approved_by,
    }
    return sorted([*others, entry], key=lambda op: op["id"])


def _approvals_of(operation: Operation) -> list[str]:
    """Who approved the operation's current arguments, in order: a reviewer's username,
    or ``policy:<name>`` for an approval by policy."""
    return [
        reviewer or f"policy:{policy}"
        for reviewer, policy in Decision.objects.filter(operation=operation)
        .counted_approvals()
        .order_by("id")
        .values_list("reviewer__username", "policy")
    ]


def _update_versioned(target: Operation | HumanRequest, noun: str, fields: dict) -> str:
    """Apply ``fields`` to ``target``'s row only if it is still at the version and status
    the caller read, bumping its version, and refresh ``target`` in place; returns the
    status it had. A stale caller gets ``StaleVersion`` and nothing is written."""
    updated = statements.update(
        type(target),
        {"id": target.pk, "version": target.version, "status": target.status},
        {"version": target.version + 1, "updated_at": timezone.now(), **fields},
    )
    if updated != 1:
        raise StaleVersion(
            f"{noun} {target.pk} changed since version {target.version}: read it again"
        )
    from_status = target.status
    _refresh(target, {**fields, "version": target.version + 1})
    return from_status


def _refresh(target, changes: dict) -> None:
    for field, value in changes.items():
        setattr(target, field, value)


@transaction.atomic
def record_run_created(*, run: Run, actor: Actor) -> Checkpoint:
    """The first checkpoint of a run (seq 1): from nothing to its initial status."""
    current = lock_run(run.pk)
    checkpoint = _append(
        current,
        {},
        actor=actor,
        event="run.created",
        from_status="",
        to_status=current.status,
        reason=f"retry of run {current.retry_of_id}" if current.retry_of_id else "",
        detail={"goal": current.goal, "retry_of": current.retry_of_id},
    )
    run.version, run.head = current.version, current.head
    return checkpoint


def record_operation_proposed(
    *, operation: Operation, actor: Actor, run: Run | None = None
) -> Checkpoint:
    """The checkpoint that fixes what was proposed, before anyone decides on it;
    ``run`` as in ``transition_operation``."""
    with transaction.atomic(savepoint=run is None):
        return _append(
            run or lock_run(operation.run_id),
            {},
            actor=actor,
            event="operation.proposed",
            from_status="",
            to_status=operation.status,
            operation=operation,
            changed=operation,
            detail={
                "proposal": {
                    "call_id": operation.call_id,
                    "action": operation.action,
                    "arguments": operation.arguments,
                    "arguments_hash": operation.arguments_hash,
                    "risk": operation.risk,
                    "proposed_risk": operation.proposed_risk,
                    "rollback_kind": operation.rollback_kind,
                    "required_approvals": operation.required_approvals,
                    "base_version": operation.base_version,
                    **_requeue(operation),
                }
            },
        )


def _requeue(operation: Operation) -> dict:
    """What a proposal's checkpoint says of an operator's requeue (nothing otherwise)."""
    if operation.requeue_of_id is None:
        return {}
    by = operation.requeued_by
    return {
        "requeue": {
            "of": operation.requeue_of_id,
            "by": by.get_username() if by else "",
            "reason": operation.requeue_reason,
        }
    }
