"""Auditors' heavy reads from a read replica (``DATABASE_REPLICA_URL``), everything else
from the primary.

The audit search, its exports, evidence bundles and the numbers page read many rows
and decide nothing; with a replica configured they run inside ``reading_replica()``,
where the router sends reads of the audit record (``AUDIT_RECORD``) to the replica.
Every write, and every read of anything else, goes to the primary, inside that block
too: who may see what (memberships, projects, users, sessions, tokens) is always read
where it is decided, so a membership just removed is not honoured for the replica's lag.

A replica lags. ``behind()`` says by how much, in the terms an auditor cares for: the
checkpoints the primary holds past the newest the replica has, dated by the oldest.
It works whatever feeds the replica (streaming or logical replication). Keys are given
before commit, so one committed out of order can be missing unnoticed for the moment
it takes the replica to apply it. An unreachable
replica is like an unreachable database: the page answers 503 and asks to try again.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import wraps

from django.db import DEFAULT_DB_ALIAS, connections, transaction

from runs.clock import db_now
from runs.models import Checkpoint

REPLICA = "replica"
# The models an auditor's page reads in bulk: the record of what happened. Reads of
# any other model go to the primary even while reading the replica; so do messages,
# whose payloads retention redacts, which a lagging replica would still show.
AUDIT_RECORD = frozenset(
    f"runs.{name}"
    for name in (
        "Alert",
        "Artifact",
        "Checkpoint",
        "CheckpointArtifact",
        "Decision",
        "HumanRequest",
        "Operation",
        "Run",
    )
)
_reading = ContextVar("reading_replica", default=False)


def configured() -> bool:
    return REPLICA in connections.settings


class ReplicaRouter:
    """Django's database router (``DATABASE_ROUTERS``): see the module's docstring."""

    def db_for_read(self, model, **hints) -> str:
        if _reading.get() and model._meta.label in AUDIT_RECORD and configured():
            return REPLICA
        return DEFAULT_DB_ALIAS

    def db_for_write(self, model, **hints) -> str:
        return DEFAULT_DB_ALIAS

    def allow_relation(self, first, second, **hints) -> bool:
        return True  # The replica is a copy of the primary: the same rows.

    def allow_migrate(self, db: str, app_label: str, **hints) -> bool:
        # The replica takes its schema from what feeds it, never from migrate.
        return db == DEFAULT_DB_ALIAS


@contextmanager
def reading_replica() -> Iterator[None]:
    """Reads of the audit record inside the block go to the replica, if there is one."""
    token = _reading.set(True)
    try:
        yield
    finally:
        _reading.reset(token)


def on_primary[T](read: Callable[[], T]) -> T:
    """``read()`` from the primary, even inside ``reading_replica()``: for what a page
    shows besides the audit record (the navigation's counts of what waits now)."""
    token = _reading.set(False)
    try:
        return read()
    finally:
        _reading.reset(token)


def reads_replica(view):
    """A view whose reads of the audit record go to the replica (see above)."""

    @wraps(view)
    def reading(*args, **kwargs):
        with reading_replica():
            return view(*args, **kwargs)

    return reading


@contextmanager
def replica_snapshot() -> Iterator[None]:
    """Like ``reading_replica()``, and every read of the replica inside the block sees
    one moment of it (a read-only REPEATABLE READ transaction), as it applies the
    primary's transactions meanwhile: a run and its checkpoints read together agree."""
    with reading_replica():
        if not configured():
            yield
            return
        with transaction.atomic(using=REPLICA):
            with connections[REPLICA].cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            yield


def streamed_from_replica[T](chunks: Iterator[T]) -> Iterator[T]:
    """``chunks`` read from the replica as they are sent, after the view has returned."""
    with reading_replica():
        yield from chunks


@dataclass(frozen=True)
class Lag:
    """The replica lacks the checkpoints the primary wrote since ``since``, the oldest
    of them written ``seconds`` ago."""

    since: datetime
    seconds: int


def behind() -> Lag | None:
    """How far the replica is behind the primary, or None when it is not (or there is
    no replica): two reads of the checkpoints' primary key, one of the clock."""
    if not configured():
        return None
    newest = Checkpoint.objects.using(REPLICA).order_by("-pk").values_list("pk", flat=True)
    missing = Checkpoint.objects.using(DEFAULT_DB_ALIAS).filter(pk__gt=newest.first() or 0)
    oldest = missing.order_by("pk").values_list("created_at", flat=True).first()
    if oldest is None:
        return None
    return Lag(since=oldest, seconds=max(0, round((db_now() - oldest) / timedelta(seconds=1))))
