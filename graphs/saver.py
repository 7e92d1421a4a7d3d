"""OversightSaver: a LangGraph checkpointer that stores threads in Oversight's database.

For agents deployed beside Oversight with access to its database (as LangGraph's own
PostgresSaver needs its database), with ``DJANGO_SETTINGS_MODULE=oversight.settings``.
Needs the server's ``langgraph`` extra. Threads live in one project; a thread whose id is
a run's ``external_id`` there is shown to auditors on that run's page.

The hot methods (put, put_writes, get_tuple, list's pending writes) are one SQL statement
each on the DB-API connection under Django's, with tuples rather than model instances:
the ORM was 2-3x slower than SqliteSaver, and Django's cursor wrapper (a placeholder
rewrite per call on SQLite) cost as much as get_tuple's statements. Errors are still
Django's. The async methods run the sync ones in Django's thread-sensitive executor
(Django's connections and transactions are sync-only).

The saver has a connection of its own (``_db``): a checkpoint is committed when LangGraph
saves it, whatever transactions the graph's own code opens and rolls back on Django's
connections meanwhile. Deleting, pruning and copying go through the caller's connection
instead, in one transaction with the checkpoint they record on the run. ``close()``
closes the saver's connection (so does the saver's garbage collection).

Deleting or pruning a thread that names an Oversight run writes a checkpoint on that run
(``graph.deleted`` / ``graph.pruned``, with how many rows went), so Oversight's own audit
chain keeps the fact; Oversight's checkpoints are never touched. ``prune`` keeps only the
latest checkpoint per namespace, which is not safe for graphs using LangGraph's (beta)
DeltaChannel, whose values need their ancestors.
"""

import functools
import json
import random
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from itertools import batched, groupby
from operator import itemgetter
from typing import Any

from asgiref.sync import sync_to_async
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.models.fields.json import KeyTransform
from django.utils import timezone
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from graphs.models import GraphCheckpoint, GraphWrite
from runs.actors import Actor
from runs.models import Project, Run
from runs.transitions import record_run_event

CHECKPOINTS = GraphCheckpoint._meta.db_table
WRITES = GraphWrite._meta.db_table
CHECKPOINT_COLUMNS = (
    "project_id, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, "
    "type, checkpoint, metadata, created_at"
)
WRITE_COLUMNS = (
    "project_id, thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, "
    "type, value"
)
PUT = (
    f"INSERT INTO {CHECKPOINTS} ({CHECKPOINT_COLUMNS}) VALUES ({', '.join(['%s'] * 10)}) "
    "ON CONFLICT (project_id, thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET "
    "parent_checkpoint_id = excluded.parent_checkpoint_id, run_id = excluded.run_id, "
    "type = excluded.type, checkpoint = excluded.checkpoint, metadata = excluded.metadata"
)
WRITE_ROW = f"({', '.join(['%s'] * 10)})"
WRITE_KEY = "(project_id, thread_id, checkpoint_ns, checkpoint_id, task_id, idx)"
# Writes on special channels (errors, interrupts, resumes) replace an earlier one with the
# same key; ordinary writes are kept as first written, so a retried task changes nothing.
UPSERT_WRITES = (
    f"ON CONFLICT {WRITE_KEY} DO UPDATE SET task_path = excluded.task_path, "
    "channel = excluded.channel, type = excluded.type, value = excluded.value"
)
INSERT_WRITES = f"ON CONFLICT {WRITE_KEY} DO NOTHING"
# A checkpoint (the latest, or by id) and its pending writes in one statement: one row
# per write (the checkpoint's columns repeated), or one row with no write.
GET = (
    "SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.type, "
    "c.checkpoint, c.metadata, "
    "w.task_id, w.task_path, w.idx, w.channel, w.type, w.value FROM ("
    "SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, "
    "metadata "
    f"FROM {CHECKPOINTS} WHERE project_id = %s AND thread_id = %s AND checkpoint_ns = %s "
    "{which}) c "
    f"LEFT JOIN {WRITES} w ON w.project_id = %s AND w.thread_id = %s "
    "AND w.checkpoint_ns = %s AND w.checkpoint_id = c.checkpoint_id"
)
GET_ONE = GET.format(which="AND checkpoint_id = %s")
GET_LATEST = GET.format(which="ORDER BY checkpoint_id DESC LIMIT 1")
# A listed page's pending writes within a thread: each row as get_tuple's, then its
# checkpoint's id (grouped by it). Across threads: _writes_of_ids, in chunks of ids.
WRITES_IN_SPAN = (
    f"SELECT task_id, task_path, idx, channel, type, value, checkpoint_id FROM {WRITES} "
    "WHERE project_id = %s AND thread_id = %s AND checkpoint_ns = %s "
    "AND checkpoint_id BETWEEN %s AND %s ORDER BY checkpoint_id"
)
CHECKPOINT_OF_WRITE = itemgetter(6)
KEY_OF_WRITE = itemgetter(6, 7, 8)
CHUNK = 500
# LangGraph's writes_sort_key (task_path, task_id, idx) of a write's row, in C.
WRITE_ORDER = itemgetter(1, 0, 2)
LIST_COLUMNS = (
    "thread_id",
    "checkpoint_ns",
    "checkpoint_id",
    "parent_checkpoint_id",
    "type",
    "checkpoint",
    "metadata",
)
# A page of one thread's namespace, newest first, by (before a checkpoint, at most so
# many): LangGraph's history and most lists. The ORM built and compiled it again at
# each call: 0.3 ms of list(limit=10)'s 0.45 (bench/langgraph_saver.py).
LIST_IN_NAMESPACE = {
    (before, limit): (
        f"SELECT {', '.join(LIST_COLUMNS)} FROM {CHECKPOINTS} "
        "WHERE project_id = %s AND thread_id = %s AND checkpoint_ns = %s"
        + (" AND checkpoint_id < %s" if before else "")
        + " ORDER BY checkpoint_id DESC"
        + (" LIMIT %s" if limit else "")
    )
    for before in (False, True)
    for limit in (False, True)
}
# The newest checkpoint of the same thread and namespace as the outer row (prune).
LATEST_OF_ROW = (
    f"(SELECT MAX(latest.checkpoint_id) FROM {CHECKPOINTS} latest "
    "WHERE latest.project_id = {table}.project_id AND latest.thread_id = {table}.thread_id "
    "AND latest.checkpoint_ns = {table}.checkpoint_ns)"
)
DELETER = "langgraph checkpointer"


def _config(thread_id: str, ns: str, checkpoint_id: str) -> dict:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def _placeholders(count: int) -> str:
    return ", ".join(["%s"] * count)


def _writes_of_ids(count: int) -> str:
    """Pending writes by checkpoint ids, across threads; then each row's KEY_OF_WRITE."""
    return (
        "SELECT task_id, task_path, idx, channel, type, value, thread_id, checkpoint_ns, "
        f"checkpoint_id FROM {WRITES} WHERE project_id = %s "
        f"AND checkpoint_id IN ({_placeholders(count)}) "
        "ORDER BY thread_id, checkpoint_ns, checkpoint_id"
    )


@functools.cache
def _qmark(sql: str) -> str:
    """sqlite3's placeholders (our statements have no literal %), rewritten once per
    statement: a rewrite took as long as a get_tuple's SQL."""
    return sql.replace("%s", "?")


def _format(sql: str) -> str:
    return sql


def _close_quietly(db) -> None:
    """Close a garbage-collected saver's connection: the DB-API one, as Django's close()
    refuses to run in an event loop's thread, where collection may happen."""
    if db.connection is not None:
        db.connection.close()


class OversightSaver(BaseCheckpointSaver[str]):
    """LangGraph checkpoints and pending writes of one Oversight project (slug or Project)."""

    def __init__(self, *, project: "Project | str", serde: SerializerProtocol | None = None):
        super().__init__(serde=serde)
        self._project = project
        self._project_id: int | None = project.pk if isinstance(project, Project) else None
        self._lock = threading.RLock()
        self._own = None

    def _db(self):
        """The saver's own connection, shared under its lock by every thread LangGraph
        saves from: LangGraph's executor starts threads for each invoke, and a connection
        per thread (Django's default) cost a connect, several times a step. Not a thread's
        own connection: that one is the thread's code's transaction too (a node that
        rolled back its own atomic block took the checkpoints saved meanwhile with it).
        After an error, a connection the database dropped (a restart, an idle timeout) is
        replaced on the next call instead of failing every call after it."""
        with self._lock:
            db = self._own
            if db is None:
                db = self._own = connections.create_connection(DEFAULT_DB_ALIAS)
                db.inc_thread_sharing()
                weakref.finalize(self, _close_quietly, db)
            elif db.connection is not None and db.errors_occurred:
                if db.is_usable():
                    db.errors_occurred = False
                else:
                    db.close()
            if db.connection is None:
                db.ensure_connection()
            return db

    def close(self) -> None:
        """Close the saver's connection (the next call opens another)."""
        with self._lock:
            if self._own is not None:
                self._own.close()

    @contextmanager
    def _cursor(self) -> Iterator[tuple[Any, Callable[[str], str]]]:
        """A DB-API cursor on the saver's connection, under the saver's lock, and the
        function that puts a statement's ``%s`` placeholders in the driver's style."""
        with self._lock:
            db = self._db()
            with db.wrap_database_errors, closing(db.connection.cursor()) as cursor:
                yield cursor, _qmark if db.vendor == "sqlite" else _format

    @property
    def project_id(self) -> int:
        """Resolved on first use, so that a saver can be built before the database is up."""
        if self._project_id is None:
            try:
                self._project_id = Project.objects.values_list("pk", flat=True).get(
                    slug=self._project
                )
            except Project.DoesNotExist:
                raise ValueError(
                    f"OversightSaver: no project with slug {self._project!r}"
                ) from None
        return self._project_id

    # -- reading --------------------------------------------------------------------------

    def _tuple(self, row: tuple, writes: list[tuple]) -> CheckpointTuple:
        """A CheckpointTuple from a row of LIST_COLUMNS and its pending writes' rows (both
        drivers return blobs as bytes). Written out: list() builds one per checkpoint."""
        thread_id, ns, checkpoint_id, parent, type_, blob, metadata = row
        loads = self.serde.loads_typed
        if len(writes) > 1:  # in the order LangGraph applies them
            writes = sorted(writes, key=WRITE_ORDER)
        return CheckpointTuple(
            _config(thread_id, ns, checkpoint_id),
            loads((type_, blob)),
            # JSON text on SQLite, and from Django's psycopg setup (it loads jsonb as text).
            json.loads(metadata) if type(metadata) is str else metadata,
            _config(thread_id, ns, parent) if parent else None,
            [(w[0], w[3], loads((w[4], w[5]))) for w in writes],
        )

    def get_tuple(self, config: dict) -> CheckpointTuple | None:
        conf = config["configurable"]
        key = [self.project_id, str(conf["thread_id"]), conf.get("checkpoint_ns", "")]
        with self._cursor() as (cursor, sql):
            if checkpoint_id := get_checkpoint_id(config):
                cursor.execute(sql(GET_ONE), [*key, checkpoint_id, *key])
            else:
                cursor.execute(sql(GET_LATEST), [*key, *key])
            rows = cursor.fetchall()
        if not rows:
            return None
        return self._tuple(rows[0][:7], [row[7:] for row in rows if row[7] is not None])

    def _page(
        self,
        config: dict | None,
        *,
        filter: dict[str, Any] | None = None,
        before: dict | None = None,
        limit: int | None = None,
    ) -> tuple[list[tuple], dict[tuple, list]]:
        """The listed rows, undecoded, and their pending writes by checkpoint key."""
        conf = config["configurable"] if config is not None else {}
        ns = conf.get("checkpoint_ns")
        if ns is not None and not filter and not get_checkpoint_id(config):
            before_id = get_checkpoint_id(before) if before is not None else None
            values = [self.project_id, str(conf["thread_id"]), ns]
            values += [before_id] * bool(before_id) + [limit] * bool(limit)
            with self._cursor() as (cursor, sql):
                cursor.execute(sql(LIST_IN_NAMESPACE[bool(before_id), bool(limit)]), values)
                page = cursor.fetchall()
            return page, self._writes_of_page(page, config)
        rows = GraphCheckpoint.objects.filter(project_id=self.project_id)
        if config is not None:
            conf = config["configurable"]
            rows = rows.filter(thread_id=str(conf["thread_id"]))
            if conf.get("checkpoint_ns") is not None:
                rows = rows.filter(checkpoint_ns=conf["checkpoint_ns"])
            if checkpoint_id := get_checkpoint_id(config):
                rows = rows.filter(checkpoint_id=checkpoint_id)
        # Key transforms rather than metadata__<key> lookups: a key may contain "__".
        for n, (key, value) in enumerate((filter or {}).items()):
            rows = rows.alias(**{f"m{n}": KeyTransform(key, "metadata")}).filter(**{f"m{n}": value})
        if before is not None and (before_id := get_checkpoint_id(before)):
            rows = rows.filter(checkpoint_id__lt=before_id)
        rows = rows.order_by("-checkpoint_id").values_list(*LIST_COLUMNS)
        with self._lock:
            db = self._db()
            # Compiled for the saver's connection and read as tuples: faster than the ORM's
            # iteration, and metadata comes back as JSON text on both databases.
            sql, params = (
                (rows[:limit] if limit else rows).query.get_compiler(connection=db).as_sql()
            )
            with db.cursor() as cursor:
                cursor.execute(sql, params)
                page = cursor.fetchall()
            return page, self._writes_of_page(page, config)

    def _writes_of_page(self, page: list[tuple], config: dict | None) -> dict[tuple, list]:
        """The pending writes of the page's checkpoints, by checkpoint key: within one
        thread, a range of its index per namespace (twice as fast as a list of ids; a
        filtered page's range reads writes it leaves out); across threads, by ids."""
        found: dict[tuple, list] = {}
        with self._cursor() as (cursor, sql):
            if config is not None:
                thread_id = str(config["configurable"]["thread_id"])
                spans: dict[str, list[str]] = {}
                for _, ns, checkpoint_id, *_ in page:  # newest first
                    spans.setdefault(ns, [checkpoint_id, checkpoint_id])[0] = checkpoint_id
                for ns, span in spans.items():
                    cursor.execute(sql(WRITES_IN_SPAN), [self.project_id, thread_id, ns, *span])
                    for checkpoint_id, rows in groupby(cursor.fetchall(), CHECKPOINT_OF_WRITE):
                        found[thread_id, ns, checkpoint_id] = list(rows)
                return found
            for ids in batched(sorted({row[2] for row in page}), CHUNK):
                cursor.execute(sql(_writes_of_ids(len(ids))), [self.project_id, *ids])
                for key, rows in groupby(cursor.fetchall(), KEY_OF_WRITE):
                    found[key] = list(rows)
        return found

    def _decoded(self, page: list[tuple], writes: dict[tuple, list]) -> Iterator[CheckpointTuple]:
        """The page's tuples, each decoded as it is asked for (a caller that stops early,
        or reads one at a time, never holds the whole thread decoded)."""
        for row in page:
            yield self._tuple(row, writes.get(row[:3], ()))

    def list(
        self,
        config: dict | None,
        *,
        filter: dict[str, Any] | None = None,
        before: dict | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        yield from self._decoded(*self._page(config, filter=filter, before=before, limit=limit))

    # -- writing --------------------------------------------------------------------------

    def put(
        self,
        config: dict,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> dict:
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
        type_, blob = self.serde.dumps_typed(checkpoint)
        metadata = get_checkpoint_metadata(config, metadata)
        metadata.pop("writes", None)
        json_field = GraphCheckpoint._meta.get_field("metadata")
        with self._cursor() as (cursor, sql):
            db = self._own
            cursor.execute(
                sql(PUT),
                [
                    self.project_id,
                    thread_id,
                    ns,
                    checkpoint["id"],
                    conf.get("checkpoint_id") or "",
                    str(metadata.get("run_id") or ""),
                    type_,
                    blob,
                    json_field.get_db_prep_save(metadata, db),
                    db.ops.adapt_datetimefield_value(timezone.now()),
                ],
            )
        return _config(thread_id, ns, checkpoint["id"])

    def put_writes(
        self,
        config: dict,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        if not writes:
            return
        conf = config["configurable"]
        key = [
            self.project_id,
            str(conf["thread_id"]),
            conf.get("checkpoint_ns", ""),
            conf["checkpoint_id"],
        ]
        params: list = []
        for n, (channel, value) in enumerate(writes):
            type_, blob = self.serde.dumps_typed(value)
            params += [
                *key,
                task_id,
                task_path,
                WRITES_IDX_MAP.get(channel, n),
                channel,
                type_,
                blob,
            ]
        conflict = UPSERT_WRITES if all(ch in WRITES_IDX_MAP for ch, _ in writes) else INSERT_WRITES
        rows = ", ".join([WRITE_ROW] * len(writes))
        with self._cursor() as (cursor, sql):
            cursor.execute(
                sql(f"INSERT INTO {WRITES} ({WRITE_COLUMNS}) VALUES {rows} {conflict}"), params
            )

    # -- deleting and copying -------------------------------------------------------------

    def _record(self, thread_ids: set[str], event: str, reason: str, counts: dict) -> None:
        """A checkpoint on each Oversight run named by a thread that lost rows."""
        runs = Run.objects.filter(project_id=self.project_id, external_id__in=thread_ids)
        for run in runs.select_related("session"):
            lost = counts.get(run.external_id, (0, 0))
            if not any(lost):
                continue
            record_run_event(
                run=run,
                actor=Actor.agent(run.session.agent),
                event=event,
                reason=reason,
                detail={
                    "thread_id": run.external_id,
                    "checkpoints": lost[0],
                    "writes": lost[1],
                    "by": DELETER,
                },
            )

    def _counts(self, cursor, where: str, params: list) -> dict[str, tuple[int, int]]:
        """Rows per thread that a delete ``where`` would remove: (checkpoints, writes)."""
        counts: dict[str, list[int]] = {}
        for n, table in enumerate((CHECKPOINTS, WRITES)):
            cursor.execute(
                f"SELECT thread_id, COUNT(*) FROM {table} WHERE {where.format(table=table)} "
                "GROUP BY thread_id",
                params,
            )
            for thread_id, count in cursor.fetchall():
                counts.setdefault(thread_id, [0, 0])[n] = count
        return {thread: tuple(pair) for thread, pair in counts.items()}

    def _delete(self, where: str, params: list, event: str, reason: str) -> None:
        """Delete checkpoints and writes matching ``where`` (``{table}`` names the row's
        table), recording on the named runs; ``where`` must not depend on checkpoints
        deleted first, so writes go first."""
        with transaction.atomic(), connection.cursor() as cursor:
            counts = self._counts(cursor, where, params)
            for table in (WRITES, CHECKPOINTS):
                cursor.execute(f"DELETE FROM {table} WHERE {where.format(table=table)}", params)
            self._record(set(counts), event, reason, counts)

    def delete_thread(self, thread_id: str) -> None:
        self._delete(
            "{table}.project_id = %s AND {table}.thread_id = %s",
            [self.project_id, str(thread_id)],
            "graph.deleted",
            "the agent deleted its LangGraph thread",
        )

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        run_ids = [str(r) for r in run_ids]
        if not run_ids:
            return
        # A write goes with its checkpoint: matched through the checkpoint's run id.
        self._delete(
            f"{{table}}.project_id = %s AND EXISTS (SELECT 1 FROM {CHECKPOINTS} doomed "
            "WHERE doomed.project_id = {table}.project_id "
            "AND doomed.thread_id = {table}.thread_id "
            "AND doomed.checkpoint_ns = {table}.checkpoint_ns "
            "AND doomed.checkpoint_id = {table}.checkpoint_id "
            f"AND doomed.run_id IN ({_placeholders(len(run_ids))}))",
            [self.project_id, *run_ids],
            "graph.deleted",
            "the agent deleted the LangGraph checkpoints of some of its graph runs",
        )

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        thread_ids = [str(t) for t in thread_ids]
        if not thread_ids:
            return
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}")
        where = (
            f"{{table}}.project_id = %s AND {{table}}.thread_id IN "
            f"({_placeholders(len(thread_ids))})"
        )
        if strategy == "keep_latest":
            where += f" AND {{table}}.checkpoint_id <> COALESCE({LATEST_OF_ROW}, '')"
        self._delete(
            where,
            [self.project_id, *thread_ids],
            "graph.pruned",
            f"the agent pruned its LangGraph thread ({strategy})",
        )

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        source, target = str(source_thread_id), str(target_thread_id)
        where = "WHERE project_id = %s AND thread_id = %s ON CONFLICT DO NOTHING"
        with transaction.atomic(), connection.cursor() as cursor:
            for table, columns in ((CHECKPOINTS, CHECKPOINT_COLUMNS), (WRITES, WRITE_COLUMNS)):
                copied = columns.replace("thread_id", "%s", 1)
                cursor.execute(
                    f"INSERT INTO {table} ({columns}) SELECT {copied} FROM {table} {where}",
                    [target, self.project_id, source],
                )

    def get_next_version(self, current: str | None, channel: None) -> str:
        """As LangGraph's own savers: a zero-padded counter and a random tie-breaker."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"

    # -- async: the sync methods in Django's thread-sensitive executor ----------------------

    async def aclose(self) -> None:
        await sync_to_async(self.close)()

    async def aget_tuple(self, config: dict) -> CheckpointTuple | None:
        return await sync_to_async(self.get_tuple)(config)

    async def alist(
        self,
        config: dict | None,
        *,
        filter: dict[str, Any] | None = None,
        before: dict | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        page = await sync_to_async(self._page)(config, filter=filter, before=before, limit=limit)
        for item in self._decoded(*page):
            yield item

    async def aput(
        self,
        config: dict,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> dict:
        return await sync_to_async(self.put)(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: dict,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await sync_to_async(self.put_writes)(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await sync_to_async(self.delete_thread)(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await sync_to_async(self.delete_for_runs)(run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await sync_to_async(self.copy_thread)(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await sync_to_async(self.prune)(thread_ids, strategy=strategy)
