"""``manage.py restore`` as an operator runs it (docs/operating/backups.md: "restore
checks the backup, replaces the database's content with it, and runs check_invariants"):
a corrupt backup is refused in one line, with a non-zero exit, and the live database is
left as it was; a backup whose invariants are broken is restored but fails, naming
each violation."""

import sqlite3
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

pytestmark = [
    pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's backup API"),
    pytest.mark.django_db(transaction=True),
]
PAGE = 4096


def backed_up(tmp_path: Path) -> Path:
    backup = tmp_path / "backup.sqlite3"
    call_command("backup", str(backup), stdout=StringIO())
    return backup


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
    corrupt(backup)
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
    with closing(sqlite3.connect(backup)) as copy:
        copy.execute("UPDATE runs_checkpoint SET reason = 'rewritten' WHERE id = ?", [edited.pk])
        copy.commit()

    done = manage("restore", str(backup))

    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert lines[-2:] == [
        "1 invariant violation(s)",
        f"restored from {backup}, but the invariants do not hold",
    ], done.stderr
    assert lines[0].startswith(f"violation: checkpoint chain broken: run {run.pk}, seq 2")
    assert "edited" in lines[0]
    assert "all invariants hold" not in done.stdout
    assert Checkpoint.objects.get(pk=edited.pk).reason == "rewritten"  # It was restored.
