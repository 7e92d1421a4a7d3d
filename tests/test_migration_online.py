"""Migrations 0016, 0017, 0018, 0023, 0027 and 0029 add indexes to the busiest tables. On
PostgreSQL a plain ``CREATE INDEX`` waits for the transactions writing its table, and
every write that comes after waits behind it until the index is built: agents' proposals
would stop for as long as a large history takes to index. Built ``CONCURRENTLY``, writes
go on."""

from functools import partial

import psycopg
import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.processes import manage_started, wait_until

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite builds an index in its one writer's turn"
)


def migrate(target) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)


def connect() -> psycopg.Connection:
    settings = connection.settings_dict
    return psycopg.connect(
        dbname=settings["NAME"],
        user=settings["USER"],
        password=settings["PASSWORD"],
        host=settings["HOST"],
        port=settings["PORT"] or 5432,
    )


def writes_to(database: psycopg.Connection, table: str) -> None:
    """A transaction that writes to ``table`` and has not committed yet."""
    database.execute(f"LOCK TABLE {table} IN ROW EXCLUSIVE MODE")


def sees_before(database: psycopg.Connection, table: str) -> None:
    """A transaction that has taken its snapshot and not ended, holding no lock. Where a
    migration adds a column before its index, the ``ALTER TABLE`` takes the table alone
    for an instant, and a transaction writing to it from before would hold the migration
    up there rather than at its index; a concurrent build waits for this one too (it
    could still see the table as it was), and must not stop writers meanwhile."""
    database.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    database.execute("SELECT 1").fetchone()


def waiting_to_build(database: psycopg.Connection) -> bool:
    row = database.execute(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE wait_event_type = 'Lock' AND query ILIKE '%CREATE INDEX%'"
    ).fetchone()
    database.commit()
    return row[0] > 0


def is_valid(database: psycopg.Connection, index: str) -> bool:
    row = database.execute(
        "SELECT indisvalid FROM pg_index JOIN pg_class ON pg_class.oid = indexrelid"
        " WHERE relname = %s",
        [index],
    ).fetchone()
    return bool(row and row[0])


def exists(database: psycopg.Connection, index: str) -> bool:
    row = database.execute("SELECT 1 FROM pg_class WHERE relname = %s", [index]).fetchone()
    database.commit()
    return row is not None


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("before", "migration", "tables", "indexes", "dropped", "waited_for"),
    [
        ("0015_delivery_status_constraint", "0016_checkpoint_text_trigrams", ["runs_checkpoint"],
         ["checkpoint_reason_trgm", "checkpoint_comment_trgm"], [], writes_to),
        ("0016_checkpoint_text_trigrams", "0017_operation_queue_index", ["runs_operation"],
         ["operation_queue_idx"], [], writes_to),
        ("0017_operation_queue_index", "0018_worker_indexes", ["runs_operation"],
         ["operation_approval_due_idx", "operation_leased_idx"], ["operation_lease_idx"],
         writes_to),
        ("0022_lanes", "0023_queue_version_indexes", ["runs_operation"],
         ["operation_queue_version_idx", "request_queue_version_idx"], [], writes_to),
        ("0026_notified_requests", "0027_operation_target", ["runs_operation"],
         ["operation_target_idx"], [], sees_before),
        # External ids per token: a column on runs, then unique indexes on four tables.
        ("0028_token_issuer", "0029_external_id_per_token",
         ["runs_run", "runs_session", "runs_operation", "runs_humanrequest"],
         [f"{kind}_external_id_{scope}" for kind in ("session", "run", "operation", "request")
          for scope in ("per_token", "tokenless")],
         [f"{kind}_unique_external_id" for kind in ("session", "run", "operation", "request")],
         sees_before),
    ],
)  # fmt: skip
def test_an_index_is_built_while_the_table_takes_writes(
    before, migration, tables, indexes, dropped, waited_for
):
    migrate([("runs", before)])
    writing, other, watching = connect(), connect(), connect()
    migrating = None
    try:
        waited_for(writing, tables[0])  # A transaction the build must wait for.
        migrating = manage_started("migrate", "runs", migration)
        reached = partial(waiting_to_build, watching)
        wait_until(reached, 60, "the migration reaching its index", migrating)

        # Another writer comes meanwhile: it must not queue behind the index.
        other.execute("SET lock_timeout = '2s'")
        for table in tables:
            other.execute(f"LOCK TABLE {table} IN ROW EXCLUSIVE MODE")
        other.rollback()

        writing.rollback()
        _, err = migrating.communicate(timeout=60)
        assert migrating.returncode == 0, err
        assert all(is_valid(watching, index) for index in indexes)
        assert not any(exists(watching, index) for index in dropped)
    finally:
        if migrating is not None and migrating.poll() is None:
            migrating.kill()
            migrating.communicate()
        for database in (writing, other, watching):
            database.close()
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
