"""Online backup and restore of the embedded SQLite database, through SQLite's own
backup API (seed 000: copying the file while WAL is in use can miss committed pages).
PostgreSQL is backed up with its own tools (pg_dump / pg_restore; see docs/operating/backups.md)."""

import re
import sqlite3
from contextlib import closing
from pathlib import Path

from django.db import connection
from django.db.migrations.loader import MigrationLoader

from runs.errors import InvalidInput


def _require_sqlite() -> Path:
    if connection.vendor != "sqlite":
        raise InvalidInput(
            "backup and restore use SQLite's backup API; for PostgreSQL use pg_dump and "
            "pg_restore (see docs/operating/backups.md)"
        )
    return Path(connection.settings_dict["NAME"])


def _check(path: Path) -> None:
    """SQLite's integrity check, which also evaluates the schema's CHECK constraints
    (one uses REGEXP, a function Django gives its own connections)."""
    with closing(sqlite3.connect(path)) as check:
        check.create_function("REGEXP", 2, _regexp, deterministic=True)
        try:
            found = check.execute("PRAGMA integrity_check").fetchone()[0]
        except sqlite3.DatabaseError as error:  # Not a database, or too damaged to check.
            raise InvalidInput(f"{path} failed SQLite's integrity check: {error}") from None
        if found != "ok":
            raise InvalidInput(f"{path} failed SQLite's integrity check")


def _regexp(pattern: str, value) -> bool:
    return value is not None and re.search(pattern, str(value)) is not None


def _copy(source: Path, target: Path) -> None:
    with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(target)) as dst:
        src.backup(dst)
    _check(target)


def backup(path: Path) -> None:
    """Copy the live database to ``path`` while others keep writing, then check the copy."""
    if path.exists():
        raise InvalidInput(f"{path} already exists; choose a new file")
    path.parent.mkdir(parents=True, exist_ok=True)
    _copy(_require_sqlite(), path)


def _same_migrations(path: Path) -> None:
    """Refuse a backup made by another version: its schema is not the one this code reads
    (a rollback restores with the version that made the backup; docs/operating/upgrading.md)."""
    known = set(MigrationLoader(None, ignore_no_migrations=True).graph.nodes)
    with closing(sqlite3.connect(path)) as backup:
        try:
            applied = set(backup.execute("SELECT app, name FROM django_migrations"))
        except sqlite3.DatabaseError:
            raise InvalidInput(f"{path} is not an Oversight database") from None
    if missing := sorted(known - applied):
        raise InvalidInput(
            f"{path} was made by an older version (without migration "
            f"{'.'.join(missing[0])}): restore it with that version, then upgrade"
        )
    if unknown := sorted(applied - known):
        raise InvalidInput(
            f"{path} was made by a newer version (with migration {'.'.join(unknown[0])}): "
            "restore it with that version"
        )


def restore(path: Path) -> None:
    """Replace the live database's content with the backup at ``path`` (checked first:
    intact, and made by this version)."""
    live = _require_sqlite()
    if not path.is_file():
        raise InvalidInput(f"{path} is not a file")
    _check(path)
    _same_migrations(path)
    connection.close()
    _copy(path, live)
