"""``manage.py restore`` as an operator runs it (docs/operating/backups.md: it "checks
the whole archive before touching anything" and runs check_invariants after): a SQLite
database part that was already corrupt when it was archived (its sha256 in the manifest
matches) is refused in one line, with a non-zero exit, and the live database is left as
it was; a backup whose invariants are broken is restored but fails, naming each
violation. tests/test_backup_archive.py has the archive's own checks."""

import hashlib
import json
import sqlite3
import tempfile
from contextlib import closing
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection

from runs.models import Checkpoint, Run
from runs.services.runs import start_run
from tests.conftest import AGENT
from tests.processes import manage
from tests.test_backup_archive import repacked

pytestmark = [
    pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's backup API"),
    pytest.mark.django_db(transaction=True),
]
PAGE = 4096


def backed_up(tmp_path: Path) -> Path:
    backup = tmp_path / "backup.tar"
    call_command("backup", str(backup), stdout=StringIO())
    return backup


def database_changed(archive: Path, change) -> None:
    """Make ``archive`` again with ``change(path)`` applied to its database part and the
    manifest's sha256 of it to match: the database was damaged before it was archived."""

    def changed(found: dict) -> None:
        with tempfile.TemporaryDirectory() as work:
            database = Path(work) / "database.sqlite3"
            database.write_bytes(found["database.sqlite3"])
            change(database)
            found["database.sqlite3"] = database.read_bytes()
        manifest = json.loads(found["manifest.json"])
        manifest["database"]["sha256"] = hashlib.sha256(found["database.sqlite3"]).hexdigest()
        found["manifest.json"] = json.dumps(manifest).encode()

    repacked(archive, changed)


def not_a_database(backup: Path) -> None:
    backup.write_bytes(b"this is a spreadsheet someone saved over the backup\n" * 200)


def cut_in_half(backup: Path) -> None:
    """A copy interrupted halfway (a full disk, a transfer cut off)."""
    data = backup.read_bytes()
    backup.write_bytes(data[: len(data) // 2])


def pages_overwritten(backup: Path) -> None:
    """Bit rot: every page after the first two overwritten with noise."""
    data = bytearray(backup.read_bytes())
    for start in range(2 * PAGE, len(data), PAGE):
        data[start + 100 : start + 400] = bytes(range(256)) + bytes(44)
    backup.write_bytes(bytes(data))


def key_changed_beside_its_index(backup: Path) -> None:
    """The unique index of the operations' keys no longer matches their table (the file
    still opens and reads: only SQLite's integrity check finds it)."""
    with closing(sqlite3.connect(backup)) as copy:
        key = copy.execute("SELECT idempotency_key FROM runs_operation").fetchone()[0]
        [index] = [
            name
            for _, name, *_ in copy.execute("PRAGMA index_list(runs_operation)")
            if [column for *_, column in copy.execute(f"PRAGMA index_info({name})")]
            == ["idempotency_key"]
        ]
        [(page,)] = copy.execute("SELECT pageno FROM dbstat WHERE name = ?", [index]).fetchall()
    data = backup.read_bytes()
    at = data.index(key.encode(), (page - 1) * PAGE)
    backup.write_bytes(data[:at] + key[::-1].encode() + data[at + len(key) :])


def live_database() -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA integrity_check")
        assert cursor.fetchone()[0] == "ok"
    return list(Run.objects.order_by("pk").values_list("pk", "goal", "version"))


@pytest.mark.parametrize(
    ("corrupt", "why"),
    [
        (not_a_database, ": file is not a database"),
        (cut_in_half, ": database disk image is malformed"),
        (pages_overwritten, ": database disk image is malformed"),
        (key_changed_beside_its_index, ""),
    ],
)
def test_restore_refuses_a_corrupt_backup_in_one_line_and_changes_nothing(
    run, propose, tmp_path, corrupt, why
):
    propose("call-1")
    backup = backed_up(tmp_path)
    database_changed(backup, corrupt)
    start_run(session=run.session, goal="written after the backup", actor=AGENT)
    before = live_database()

    done = manage("restore", str(backup))

    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"CommandError: {backup} failed SQLite's integrity check{why}"
    ], done.stderr
    assert done.stdout == ""
    assert live_database() == before


def test_restore_of_a_backup_with_broken_invariants_fails_naming_them(run, propose, tmp_path):
    """The backup is intact as a file but a checkpoint in it was edited: it is restored
    (what an operator asked for), and the command fails naming the broken link."""
    propose("call-1")
    backup = backed_up(tmp_path)
    edited = Checkpoint.objects.get(run=run, seq=2)

    def rewritten(database: Path) -> None:
        with closing(sqlite3.connect(database)) as copy:
            sql = "UPDATE runs_checkpoint SET reason = 'rewritten' WHERE id = ?"
            copy.execute(sql, [edited.pk])
            copy.commit()

    database_changed(backup, rewritten)

    done = manage("restore", str(backup))

    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert lines[-2:] == [
        "1 invariant violation(s)",
        f"restored from {backup}, but the invariants do not hold",
    ], done.stderr
    # (The restore's own checkpoints are logged before: the waiting proposal it marked.)
    [violation] = [line for line in lines if line.startswith("violation: ")]
    assert violation.startswith(f"violation: checkpoint chain broken: run {run.pk}, seq 2")
    assert "edited" in violation
    assert "all invariants hold" not in done.stdout
    assert Checkpoint.objects.get(pk=edited.pk).reason == "rewritten"  # It was restored.
