"""The database part of a backup, per backend: a consistent copy taken while others keep
writing, the artifacts and migrations that copy names (read from the copy itself, so
that they are the copy's, not the live database's a moment later), a check of a copy's
integrity, and the replacement of the live database's content by a copy.

SQLite copies through its own backup API (copying the file while WAL is in use can
miss committed pages, seed 000). PostgreSQL copies with ``pg_dump -Fc`` inside a
snapshot this process exports and reads too, and restores with ``pg_restore`` in one
transaction. The credentials of ``DATABASE_URL`` reach PostgreSQL's tools through the
environment (``PGPASSWORD``…), never their command line, which ``ps`` shows anyone."""

import os
import re
import shutil
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

from django.db import connection, transaction

from runs.errors import InvalidInput
from runs.models import Artifact, CheckpointArtifact

SQLITE, POSTGRESQL = "sqlite", "postgresql"
MIGRATIONS_SQL = "SELECT app, name FROM django_migrations ORDER BY app, name"
# libpq's environment variable for each connection option of DATABASE_URL passed on.
# ``options`` is left out on purpose: it carries the sessions' statement bounds
# (``OVERSIGHT_DB_*``), which a dump of a large history must not meet.
LIBPQ_OPTIONS = {
    "sslmode": "PGSSLMODE",
    "sslrootcert": "PGSSLROOTCERT",
    "sslcert": "PGSSLCERT",
    "sslkey": "PGSSLKEY",
    "connect_timeout": "PGCONNECT_TIMEOUT",
}


def named_artifacts_sql() -> str:
    """Every artifact a copy holds, by sha256, its size, and whether a checkpoint
    references it (one that none does may be collected meanwhile: it is left out)."""
    artifacts, refs = Artifact._meta.db_table, CheckpointArtifact._meta.db_table
    return (
        f"SELECT a.sha256, a.size, EXISTS (SELECT 1 FROM {refs} r WHERE r.artifact_id = a.id) "
        f"FROM {artifacts} a ORDER BY a.sha256"
    )


def backend() -> str:
    if connection.vendor not in (SQLITE, POSTGRESQL):
        raise InvalidInput(f"backups know SQLite and PostgreSQL, not {connection.vendor}")
    return connection.vendor


def snapshot(target: Path) -> tuple[list[tuple], list[tuple]]:
    """Copy the live database to ``target``; returns what the copy names: its artifacts
    (sha256, size, referenced) and its migrations (app, name)."""
    if backend() == SQLITE:
        return _sqlite_snapshot(target)
    return _postgresql_snapshot(target)


def check(copy: Path, archive: Path) -> set[tuple[str, str]]:
    """Check a copy's integrity (all of it is read); returns its migrations."""
    if backend() == SQLITE:
        return _sqlite_check(copy, archive)
    return _postgresql_check(copy, archive)


def replace(copy: Path) -> None:
    """Replace the live database's content with ``copy``'s."""
    connection.close()
    if backend() == SQLITE:
        _sqlite_copy(copy, Path(connection.settings_dict["NAME"]))
    else:
        _pg_run("pg_restore", *RESTORE_OPTIONS, "--dbname", connection.settings_dict["NAME"], copy)


# --- SQLite ----------------------------------------------------------------------------


def _sqlite_copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(target)) as dst:
        src.backup(dst)


def _sqlite_snapshot(target: Path) -> tuple[list[tuple], list[tuple]]:
    _sqlite_copy(Path(connection.settings_dict["NAME"]), target)
    with closing(sqlite3.connect(target)) as copy:
        named = copy.execute(named_artifacts_sql()).fetchall()
        migrations = copy.execute(MIGRATIONS_SQL).fetchall()
    return [(sha, size, bool(referenced)) for sha, size, referenced in named], migrations


def _sqlite_check(copy: Path, archive: Path) -> set[tuple[str, str]]:
    """SQLite's integrity check, which also evaluates the schema's CHECK constraints
    (one uses REGEXP, a function Django gives its own connections)."""
    with closing(sqlite3.connect(copy)) as database:
        database.create_function("REGEXP", 2, _regexp, deterministic=True)
        try:
            found = database.execute("PRAGMA integrity_check").fetchone()[0]
        except sqlite3.DatabaseError as error:  # Not a database, or too damaged to check.
            raise InvalidInput(f"{archive} failed SQLite's integrity check: {error}") from None
        if found != "ok":
            raise InvalidInput(f"{archive} failed SQLite's integrity check")
        try:
            return set(database.execute(MIGRATIONS_SQL))
        except sqlite3.DatabaseError:
            raise InvalidInput(f"{archive} does not hold an Oversight database") from None


def _regexp(pattern: str, value) -> bool:
    return value is not None and re.search(pattern, str(value)) is not None


# --- PostgreSQL ------------------------------------------------------------------------

# How long pg_dump waits for a table's lock before it gives up.
LOCK_WAIT = "60s"
# Into the database as it is: its tables dropped and made again, as the current role,
# all in one transaction (a failure leaves the database as it was).
RESTORE_OPTIONS = (
    "--clean",
    "--if-exists",
    "--no-owner",
    "--no-privileges",
    "--single-transaction",
)
COPY_ROW = re.compile(r"^\d+\t([^\t]+)\t([^\t]+)\t")


def _postgresql_snapshot(target: Path) -> tuple[list[tuple], list[tuple]]:
    """``pg_dump`` inside a snapshot that this transaction exports and reads: the dump,
    the artifacts and the migrations are of one moment."""
    connection.ensure_connection()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        # Idle while pg_dump works, and kept open until it has read its snapshot.
        cursor.execute("SET LOCAL idle_in_transaction_session_timeout = 0")
        cursor.execute("SELECT pg_export_snapshot()")
        (snapshot_id,) = cursor.fetchone()
        cursor.execute(named_artifacts_sql())
        named = cursor.fetchall()
        cursor.execute(MIGRATIONS_SQL)
        migrations = cursor.fetchall()
        # A table locked by a migration or a restore would otherwise have it (and this
        # open transaction) wait without end: give up with an error instead.
        _pg_run(
            "pg_dump",
            "--format=custom",
            f"--snapshot={snapshot_id}",
            f"--lock-wait-timeout={LOCK_WAIT}",
            "--file",
            target,
        )
    return named, migrations


def _postgresql_check(copy: Path, archive: Path) -> set[tuple[str, str]]:
    """Read the whole dump (as ``pg_restore`` would, into nothing), then its migrations."""
    _pg_run("pg_restore", "--file", os.devnull, copy, failed=f"{archive} is not a readable dump")
    listed = _pg_run("pg_restore", "--data-only", "--table=django_migrations", "--file", "-", copy)
    return {(m[1], m[2]) for line in listed.splitlines() if (m := COPY_ROW.match(line))}


def _pg_run(tool: str, *args, failed: str = "") -> str:
    """Run PostgreSQL's ``tool`` against DATABASE_URL's database; its output. A missing
    tool or a failure is one line (``failed``, or the tool's last words)."""
    if shutil.which(tool) is None:
        raise InvalidInput(f"{tool} (PostgreSQL's client tools) is not installed")
    done = subprocess.run(
        [tool, *map(str, args)], env=_pg_environment(), capture_output=True, text=True
    )
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()
        raise InvalidInput(failed or f"{tool} failed: {said[-1] if said else done.returncode}")
    return done.stdout


def _pg_environment() -> dict[str, str]:
    database = connection.settings_dict
    given = {
        "PGHOST": database["HOST"],
        "PGPORT": str(database["PORT"] or ""),
        "PGUSER": database["USER"],
        "PGPASSWORD": database["PASSWORD"],
        "PGDATABASE": database["NAME"],
    }
    for option, variable in LIBPQ_OPTIONS.items():
        if option in database["OPTIONS"]:
            given[variable] = str(database["OPTIONS"][option])
    return {**os.environ, **{name: value for name, value in given.items() if value}}
