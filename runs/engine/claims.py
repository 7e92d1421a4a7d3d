"""Claiming work: an approved operation, or one whose lease expired mid-way.

A claim takes a lease (owner, expiry) and a new fencing epoch in one transaction and
records a checkpoint; the worker may carry out an effect inside the database in the
same transaction (``Execution.run_at_once``). Lease times are the database's
(``runs.clock``): a host whose clock runs ahead sees no live lease as expired. Locks are
taken run first, then operation — the order every other writer uses — so claims cannot
deadlock with decisions or cancellations. On PostgreSQL a run another worker is writing
is skipped (``FOR UPDATE SKIP LOCKED``), and with it every other operation of that run:
the next candidates come from runs not yet found busy, so one run with many approved
operations never hides the work of the others. On SQLite the immediate transaction
already serialises writers. Either way the operation's conditional update on
``version`` lets exactly one claimant win.

Every claim counts as an attempt, durably, before anything is fired: an attempt that
kills or wedges its worker is counted like one that records its failure, so a poison
operation runs out of attempts instead of being taken over every lease period forever.
An effect carried out in the claim's own transaction would roll its count back with it
if the worker died there, so that count is committed first, in a transaction of its
own (taken back as one less if no claim follows).

An operator's pause (``WorkerPause``: of every lane, or of one) holds claims: the
candidates and the re-read inside the claim's transaction both leave out what is
paused (``_not_paused``, a condition of the same query, read without a lock), so a
pause committed between the two is seen, and one round costs no query more. What was
claimed before the pause goes on to its end.

Where writers take turns anyway (SQLite), a worker claims several first attempts at
effects inside the database together (``_claim_together``): one count, one
transaction and one commit for up to ``TOGETHER`` of them, each in a savepoint of its
own, the transaction bounded in time. The commit is most of what a transfer costs
there; a drain ran 1.4 times as fast.
"""

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from django.db import OperationalError, connection, transaction
from django.db.models import Exists, F, OuterRef, Q, QuerySet

from runs import statements
from runs.actions.registry import get_action
from runs.actors import Actor
from runs.clock import db_now
from runs.errors import StaleVersion
from runs.models import Operation, Run
from runs.models.operations import LEASED
from runs.models.workers import WorkerPause
from runs.statements import Prepared
from runs.transitions import transition_operation, try_lock_run

log = logging.getLogger(__name__)
CANDIDATES = 20
# Where writers take turns anyway (SQLite), a worker claims and carries out up to this
# many first attempts at effects inside the database in one transaction
# (``_claim_together``), starting none after this long.
TOGETHER = 8
TOGETHER_SECONDS = 0.010
# The checkpoint event of a claim that takes over an expired lease (/metrics counts them).
TAKEN_OVER = "operation.lease_taken_over"


def claimable(now: datetime):
    """Operations a server worker may take now: approved (and still valid), or in the
    middle of execution or rollback with an expired lease. Runs halted for
    reconciliation are left alone until a person resolves their alert."""
    fresh = Q(status=Operation.Status.APPROVED, approval_expires_at__gt=now)
    abandoned = Q(status__in=LEASED, lease_expires_at__lte=now)
    return (
        Operation.objects.filter(fresh | abandoned, executor=Operation.Executor.SERVER)
        .exclude(run__reason=Run.Reason.RECONCILIATION)
        .order_by("pk")
    )


def take_lease(
    operation: Operation,
    *,
    owner: str,
    until: datetime,
    actor: Actor,
    reason: str,
    run: Run,
    counted: bool = False,
) -> int:
    """Take ``operation`` for execution under a new fencing epoch (returned), leased
    to ``owner`` until ``until``: an approved one goes in flight; one already in flight
    or rolling back whose lease expired is taken over where it stands, recorded as
    ``operation.lease_taken_over``. Each claim counts as an attempt (``counted``: this
    claim's attempt is already in ``operation.attempts``). Call it inside a
    transaction holding the lock of ``run``, the operation's run."""
    takeover = operation.status != Operation.Status.APPROVED
    epoch = operation.fencing_epoch + 1
    attempt = operation.attempts if counted else operation.attempts + 1
    transition_operation(
        operation=operation,
        to=operation.status if takeover else Operation.Status.IN_FLIGHT,
        event=TAKEN_OVER if takeover else "operation.status",
        run=run,
        actor=actor,
        reason=reason,
        changes={
            "lease_owner": owner,
            "lease_expires_at": until,
            "fencing_epoch": epoch,
            **({} if counted else {"attempts": attempt}),
        },
        detail={
            "lease": {
                "owner": owner,
                "epoch": epoch,
                "expires_at": until.isoformat(),
                "attempt": attempt,
            }
        },
    )
    return epoch


def claim_next(
    *,
    worker: str,
    lease: timedelta,
    now: datetime | None = None,
    then: Callable[[Operation, Run], None] | None = None,
    skip: set[str] = frozenset(),
) -> Operation | None:
    """Claim the first claimable operation that no other worker is writing, and that is
    in none of the lanes in ``skip`` (full, or paused by a breaker) nor held by an
    operator's pause, or None. ``then(operation, run)``, if given, is called inside the
    claim's transaction, which holds the lock of ``run``; the claim commits with whatever
    it writes (the operation returned is then as it was claimed, not as ``then`` left
    it)."""
    claimed = claim(worker=worker, lease=lease, now=now, then=then, skip=skip)
    return claimed[0] if claimed else None


def claim(
    *,
    worker: str,
    lease: timedelta,
    now: datetime | None = None,
    then: Callable[[Operation, Run], None] | None = None,
    skip: set[str] = frozenset(),
    most: int = 1,
    refuse: frozenset[str] = frozenset(),
) -> list[Operation]:
    """Claim as ``claim_next`` does, but no operation of an action in ``refuse`` (one
    this worker cannot carry out); or, with ``most`` > 1 and ``then``, when the first
    candidates hold several first attempts at effects inside the database (on
    different runs), up to ``most`` of them in one transaction (``_claim_together``)."""
    now = now or db_now()
    busy: set[int] = set()  # Runs another transaction holds: their operations wait.
    for candidates in _pages(now, busy, skip, refuse):
        together = _first_attempts_at_once(candidates, most) if then is not None else []
        if len(together) > 1:
            claimed = _claim_together(together, worker, lease, now, then)
            if claimed:
                return claimed
        for op_id, run_id, action, status, attempts in candidates:
            if run_id in busy:
                continue
            # Only an effect inside the database may be carried out in the claim's own
            # transaction, so only its attempt is counted before it.
            counted = then is not None and status == Operation.Status.APPROVED and _at_once(action)
            try:
                operation = _claim(op_id, run_id, worker, lease, now, then, counted, attempts)
            except _RunBusy:
                busy.add(run_id)
                continue
            if operation is not None:
                return [operation]
    return []


def _pages(now: datetime, busy: set[int], skip: set[str], refuse: frozenset[str]):
    """The claimable operations, ``CANDIDATES`` at a time, but those of runs found
    ``busy`` meanwhile (or in lanes in ``skip``, or of actions in ``refuse``)."""
    after = 0
    while True:
        if busy or skip or refuse:
            candidates = list(_candidates(now, after, busy, skip, refuse))
        else:  # As usual: the same statement every time.
            candidates = _FIRST_CANDIDATES.rows(now=now, after=after)
        yield candidates
        if len(candidates) < CANDIDATES:
            return
        after = candidates[-1][0]


def _candidates(now: datetime, after: int, busy=(), skip=(), refuse=()):
    """The next claimable operations after key ``after``, but those of runs in ``busy``,
    in lanes in ``skip`` or of actions in ``refuse``."""
    return (
        _not_paused(claimable(now))
        .filter(pk__gt=after)
        .exclude(run_id__in=busy)
        .exclude(lane__in=skip)
        .exclude(action__in=refuse)
        .values_list("pk", "run_id", "action", "status", "attempts")[:CANDIDATES]
    )


def _not_paused(operations: QuerySet[Operation]) -> QuerySet[Operation]:
    """``operations`` but while every lane is paused (none), and those of a paused lane:
    two ``NOT EXISTS``, each found by ``WorkerPause.lane``'s unique index."""
    pauses = WorkerPause.objects.all()
    every_lane = pauses.filter(lane=WorkerPause.EVERY_LANE)
    return operations.filter(~Exists(every_lane), ~Exists(pauses.filter(lane=OuterRef("lane"))))


_FIRST_CANDIDATES = Prepared(_candidates, now=datetime, after=int)
_CLAIMABLE = Prepared(
    lambda now, pk: _not_paused(claimable(now)).filter(pk=pk)[:1], now=datetime, pk=int
)


class _RunBusy(Exception):
    """Another transaction holds the operation's run."""


def _at_once(action: str) -> bool:
    registered = get_action(action)
    return registered is not None and registered.in_database


def _claim(op_id, run_id, worker, lease, now, then, counted, attempts) -> Operation | None:
    if counted and not _count_attempts([op_id], attempts):
        return None  # Another worker is claiming it.
    claimed = None
    try:
        claimed = _claim_locked(op_id, run_id, worker, lease, now, then, counted)
    finally:
        if counted and claimed is None:  # No attempt was made after all.
            _uncount_attempts([op_id])
    return claimed


def _first_attempts_at_once(candidates, most: int) -> list[tuple[int, int]]:
    """Up to ``most`` of ``candidates`` (operation, run) that ``_claim_together`` may
    take: approved, never attempted, an effect inside the database, one per run."""
    chosen: dict[int, int] = {}  # run: operation
    for op_id, run_id, action, status, attempts in candidates:
        if len(chosen) == most:
            break
        if (
            run_id not in chosen
            and status == Operation.Status.APPROVED
            and attempts == 0
            and _at_once(action)
        ):
            chosen[run_id] = op_id
    return [(op_id, run_id) for run_id, op_id in chosen.items()]


def _claim_together(together, worker, lease, now, then) -> list[Operation]:
    """Claim operations ``together`` (operation, run) in one transaction, each in a
    savepoint of its own with its own conditions (the run's lock, its version, the
    claimable re-read), and ``then`` carrying each out: one commit, and one count of
    their attempts before it, for several effects inside the database. Their attempts
    are counted together first, so a worker that dies in there leaves each counted
    once: a first attempt only, so an operation counted with a poison one goes alone
    the next time. The transaction is bounded: no operation starts after
    ``TOGETHER_SECONDS``, and the rest are taken back."""
    counted = _count_attempts([op_id for op_id, _ in together], 0)
    runs = dict(together)
    claimed: list[Operation] = []
    kept: set[int] = set()
    deadline = time.monotonic() + TOGETHER_SECONDS
    try:
        with transaction.atomic():
            for op_id in counted:
                if claimed and time.monotonic() >= deadline:
                    break
                try:
                    operation = _claim_locked(op_id, runs[op_id], worker, lease, now, then, True)
                except _RunBusy:
                    continue
                if operation is not None:
                    claimed.append(operation)
        kept = {operation.pk for operation in claimed}
    finally:
        if left := [op_id for op_id in counted if op_id not in kept]:
            _uncount_attempts(left)  # No attempt was made on these after all.
    return claimed


def _claim_locked(op_id, run_id, worker, lease, now, then, counted) -> Operation | None:
    try:
        with transaction.atomic():
            run = try_lock_run(run_id)
            if run is None:
                raise _RunBusy
            operation = _CLAIMABLE.first(now=now, pk=op_id)
            if operation is None:
                return None
            take_lease(
                operation,
                run=run,
                owner=worker,
                until=now + lease,
                actor=Actor.worker(worker),
                reason=f"claimed by {worker}"
                if operation.status == Operation.Status.APPROVED
                else f"lease of {operation.lease_owner} expired; resumed by {worker}",
                counted=counted,
            )
            if then is not None:
                then(operation, run)
                if transaction.get_rollback():  # What ``then`` did left nothing to commit.
                    return None
    except StaleVersion:  # Another claimant won; this claim rolls back whole.
        return None
    return operation


def _count_attempts(op_ids: list[int], seen: int) -> list[int]:
    """Count the attempt about to be made on each approved operation of ``op_ids``
    (whose count was ``seen``) in a transaction of its own, committed before the
    claim's that may carry the effect out: if the worker dies in there, the count
    stays. Returns the operations counted: a second worker counting from the same
    reading finds the count moved and leaves the operation."""
    with transaction.atomic():
        if len(op_ids) == 1:  # As usual: the same statement every time.
            free = [pk for (pk,) in _FREE_TO_COUNT.rows(pk=op_ids[0], seen=seen)]
        else:
            free = list(_free_to_count(op_ids, seen).values_list("pk", flat=True))
        if len(free) == 1:
            where = {"id": free[0], "status": Operation.Status.APPROVED, "attempts": seen}
            return free if statements.update(Operation, where, {"attempts": seen + 1}) else []
        if free:  # Held by this transaction: each is counted.
            Operation.objects.filter(pk__in=free).update(attempts=seen + 1)
        return free


def _uncount_attempts(op_ids: list[int]) -> None:
    """Take back this worker's count for claims that did not happen (the run was busy,
    another worker took the operation, or the claim rolled back whole): one less,
    whatever others counted meanwhile, and whatever became of the operation. A claim
    holding the row is waited for (PostgreSQL bounds the wait: a stopped holder's
    count stays, one attempt too many): one passed by would leave this count for good,
    and under eight busy workers operations gave up after attempts never made."""
    try:
        with transaction.atomic():
            counted = Operation.objects.filter(pk__in=op_ids, attempts__gt=0)
            counted.update(attempts=F("attempts") - 1)
    except OperationalError as error:
        log.warning("operations %s: an attempt not made stays counted: %s", op_ids, error)


def _free_to_count(op_ids, seen: int):
    """The approved operations of ``op_ids`` counted ``seen`` times, but those another
    transaction holds (a claim carrying the effect out, stopped maybe): passed by
    instead of waited for (``SKIP LOCKED``)."""
    skip_locked = connection.features.has_select_for_update_skip_locked
    free = Operation.objects.select_for_update(skip_locked=skip_locked).order_by("pk")
    return free.filter(pk__in=op_ids, status=Operation.Status.APPROVED, attempts=seen)


_FREE_TO_COUNT = Prepared(
    lambda pk, seen: _free_to_count([pk], seen).values_list("pk"), pk=int, seen=int
)
