"""Moving an installation from the embedded SQLite to PostgreSQL (``manage.py
move_to_postgres``).

Every row of every table is copied as it is, primary keys, times and JSON included,
and nothing is recomputed: a checkpoint's hash is over its content, so the same content
keeps its chain verifiable. Rows go in column by column as the database stores them
(``get_db_prep_save``), not through ``save()`` or ``bulk_create()``, which would give an
``auto_now`` field today's time.

The schema is made by the product's own ``migrate``, run as a command of the moved
installation (``there()``): the data migrations write through the default database,
which in this process is the SQLite one being moved.

The copy is one moment of the SQLite database: the move holds its write lock from the
first row read to the last. A write meanwhile waits, and lands in SQLite after the copy
(or fails, past SQLite's busy timeout), so the web is stopped first; so are the workers,
which would go on firing from the database being left (their heartbeat says whether any
is alive: checked again once the lock is held). The PostgreSQL
database must hold no installation yet; once migrated, it is emptied of what
``migrate`` seeds (roles, permissions, content types) and filled in one
transaction: a copy that fails leaves no row of it. The sequences are set past the
largest keys copied.

The artifacts stay in the store the installation uses, unless ``artifact_store`` names
another (an object store, for several machines): each blob a row names is copied there
first, its bytes checked against their sha256 as they are read.
"""

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import batched

from django.apps import apps
from django.conf import settings
from django.core.files.base import File
from django.core.files.storage import Storage, storages
from django.core.management.color import no_style
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connection, connections, transaction
from django.db.migrations.executor import MigrationExecutor
from django.db.models import BinaryField

from oversight.env import artifact_storage, database_from_url
from runs import artifact_store
from runs.backups import refuse_while_workers_alive
from runs.errors import InvalidInput
from runs.models import Artifact

TARGET = "move_target"
STOP_WORKERS = "stop them first: they would go on from the SQLite database"
ROWS_AT_ONCE = 2000
FEW_AT_ONCE = 20
# Tables ``migrate`` fills by itself: a target holding rows only there holds no
# installation yet.
SEEDED_BY_MIGRATE = frozenset(
    {"django_content_type", "auth_permission", "auth_group", "auth_group_permissions"}
)


@dataclass(frozen=True)
class Moved:
    rows: int
    tables: int
    artifacts: int  # Copied into another store (0: they stay where they are).
    missing: list[str]  # Blobs rows name that the store lacks or holds damaged.


def move_to_postgres(url: str, *, artifact_store_url: str = "") -> Moved:
    """Copy this SQLite installation into the PostgreSQL database at ``url`` (see the
    module's docstring); raises ``InvalidInput`` saying why it would not."""
    if connection.vendor != "sqlite":
        raise InvalidInput("this installation runs on PostgreSQL already (DATABASE_URL is set)")
    refuse_while_workers_alive(STOP_WORKERS)
    executor = MigrationExecutor(connection)
    if executor.migration_plan(executor.loader.graph.leaf_nodes()):
        raise InvalidInput("this installation's database is not migrated: run manage.py migrate")
    store = _store(artifact_store_url)
    with _target(url) as target:
        _refuse_an_installation(target)
        migrated = there("migrate", url, artifact_store_url)
        if migrated.returncode:
            raise InvalidInput(f"migrate failed there: {_last_line(migrated.stderr)}")
        # Before the rows: a store that fails leaves the database as migrate left it,
        # to move into again. Blobs are named by their content: copied twice, or one
        # more than the rows name, is harmless (collect_orphan_artifacts).
        artifacts, missing = _copy_artifacts(store) if store else (0, [])
        try:
            with transaction.atomic(using=DEFAULT_DB_ALIAS), transaction.atomic(using=TARGET):
                # Again, now that SQLite's write lock is held: none can start meanwhile.
                refuse_while_workers_alive(STOP_WORKERS)
                models = _models()
                _empty(target, models)
                rows = sum(_copy(model, target) for model in models)
                with target.cursor() as cursor:
                    for sql in target.ops.sequence_reset_sql(no_style(), models):
                        cursor.execute(sql)
        except DatabaseError as error:
            reason = _first_line(error)
            raise InvalidInput(f"the copy failed, and none of it was kept: {reason}") from None
    return Moved(rows=rows, tables=len(models), artifacts=artifacts, missing=missing)


def there(command: str, url: str, artifact_store_url: str) -> subprocess.CompletedProcess:
    """``manage.py COMMAND`` run as the moved installation: on the PostgreSQL database at
    ``url``, with this installation's key (sessions and signed links stay valid only
    under the same one) and its artifacts' store."""
    environment = {
        **os.environ,
        "DATABASE_URL": url,
        "OVERSIGHT_SECRET_KEY": settings.SECRET_KEY,
        **({"OVERSIGHT_ARTIFACT_STORE": artifact_store_url} if artifact_store_url else {}),
    }
    return subprocess.run(
        [sys.executable, str(settings.BASE_DIR / "manage.py"), command],
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )


def _last_line(text: str) -> str:
    return (text.strip().splitlines() or ["(nothing said)"])[-1]


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def _store(url: str) -> Storage | None:
    if not url:
        return None
    try:
        return storages.create_storage(artifact_storage(url))
    except Exception as error:  # ImproperlyConfigured, or the backend's own refusal.
        raise InvalidInput(f"--artifact-store: {error}") from None


@contextmanager
def _target(url: str) -> Iterator:
    """The PostgreSQL database at ``url``, as the connection alias ``TARGET``."""
    try:
        database = database_from_url(url, "the PostgreSQL URL")
    except Exception as error:
        raise InvalidInput(str(error)) from None
    configured = {DEFAULT_DB_ALIAS: connections.settings[DEFAULT_DB_ALIAS], TARGET: database}
    connections.settings[TARGET] = connections.configure_settings(configured)[TARGET]
    try:
        target = connections[TARGET]
        try:
            target.ensure_connection()
        except Exception as error:
            reason = _first_line(error)
            raise InvalidInput(f"cannot reach the PostgreSQL database: {reason}") from None
        yield target
    finally:
        connections[TARGET].close()
        del connections[TARGET]
        del connections.settings[TARGET]


def _refuse_an_installation(target) -> None:
    tables = set(target.introspection.table_names()) - SEEDED_BY_MIGRATE
    quote = target.ops.quote_name
    with target.cursor() as cursor:
        for table in sorted(tables & {model._meta.db_table for model in _models()}):
            cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {quote(table)})")
            if cursor.fetchone()[0]:
                raise InvalidInput(
                    f"the PostgreSQL database holds an installation already ({table} has rows): "
                    "move into an empty database"
                )


def _models() -> list:
    """Every table's model, the many-to-many tables included."""
    return [
        model
        for model in apps.get_models(include_auto_created=True)
        if model._meta.managed and not model._meta.proxy
    ]


def _empty(target, models: list) -> None:
    tables = [model._meta.db_table for model in models]
    with target.cursor() as cursor:
        for sql in target.ops.sql_flush(no_style(), tables, allow_cascade=True):
            cursor.execute(sql)


def _copy(model, target) -> int:
    """Every row of ``model``'s table, as stored; returns how many. Rows holding bytes
    (a graph's checkpoint, a recorded answer) go a few at a time."""
    fields = model._meta.concrete_fields
    at_once = FEW_AT_ONCE if any(isinstance(f, BinaryField) for f in fields) else ROWS_AT_ONCE
    quote = target.ops.quote_name
    insert = (
        f"INSERT INTO {quote(model._meta.db_table)} "
        f"({', '.join(quote(field.column) for field in fields)}) "
        f"VALUES ({', '.join(['%s'] * len(fields))})"
    )
    rows = model._base_manager.using(DEFAULT_DB_ALIAS).order_by("pk").iterator(at_once)
    copied = 0
    with target.cursor() as cursor:
        for batch in batched(rows, at_once):
            values = [
                [field.get_db_prep_save(getattr(row, field.attname), target) for field in fields]
                for row in batch
            ]
            cursor.executemany(insert, values)
            copied += len(batch)
    return copied


def _copy_artifacts(store: Storage) -> tuple[int, list[str]]:
    """Each blob the rows name, into ``store``, checked as it is read; returns how many
    were copied, and the sha256 of those missing or damaged here (not copied, as
    ``check_invariants`` would name them here too)."""
    copied, missing = 0, []
    names = Artifact.objects.order_by("pk").values_list("sha256", flat=True)
    for sha256 in names.iterator(ROWS_AT_ONCE):
        name = artifact_store.name_of(sha256)
        with _answered_by(store):
            if store.exists(name):
                continue
        try:
            content = artifact_store.checked(sha256)
        except (artifact_store.ArtifactMissing, artifact_store.ArtifactDamaged):
            missing.append(sha256)
            continue
        with content, _answered_by(store):
            saved = store.save(name, File(content, name=name))
        if saved != name:
            raise InvalidInput(f"--artifact-store kept {sha256} as {saved!r}, not {name!r}")
        copied += 1
    return copied, missing


@contextmanager
def _answered_by(store: Storage) -> Iterator[None]:
    """The store's own failures (refused, timed out, denied) as one line."""
    try:
        yield
    except Exception as error:
        raise InvalidInput(f"--artifact-store: {_first_line(error)}") from None
