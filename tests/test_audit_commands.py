"""verify_audit_chain, and the online backup and restore of the SQLite database (the
archive itself: tests/test_backup_archive.py)."""

import sqlite3
import subprocess
import sys
from contextlib import closing
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from runs.models import Account, ApprovalPolicy, Checkpoint, LedgerEntry, Operation
from runs.services.runs import start_run
from tests.conftest import AGENT
from tests.processes import ROOT, child_env, wait_until
from tests.test_restore_refusals import database_changed

sqlite_only = pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's backup API")


def run_command(name: str, *args) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    try:
        call_command(name, *args, stdout=out, stderr=err)
    except SystemExit as exit_:
        return exit_.code, out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def test_verify_audit_chain_passes_then_names_an_edited_checkpoint(run, propose):
    propose("call-1")
    code, out, _ = run_command("verify_audit_chain")
    assert code == 0 and "verify" in out

    edited = Checkpoint.objects.get(run=run, seq=2)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE runs_checkpoint SET reason = 'rewritten' WHERE id = %s", [edited.pk])

    code, _, err = run_command("verify_audit_chain")
    assert code == 1
    assert f"run {run.pk}, seq 2 (checkpoint {edited.pk})" in err and "edited" in err


@sqlite_only
@pytest.mark.django_db(transaction=True)
def test_backup_while_a_worker_commits_then_restore_holds_every_invariant(
    project, session, propose, tmp_path
):
    ApprovalPolicy.objects.create(project=project, action="ledger.transfer", approvals_required=0)
    Account.objects.create(project=project, name="A", balance=Decimal("1000.00"))
    Account.objects.create(project=project, name="B", balance=Decimal("0.00"))
    for n in range(30):
        target = start_run(session=session, goal=f"batch {n}", actor=AGENT)
        propose(
            f"t{n}", target=target, arguments={"from": "A", "to": "B", "amount": "1.00"}, risk="low"
        )
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "runworker", "--once"],
        cwd=ROOT,
        env=child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    first = Operation.objects.filter(status="committed").exists
    wait_until(first, message="the worker's first commit", process=worker)
    call_command("backup", str(tmp_path / "backup.tar"), stdout=StringIO())
    assert worker.wait(timeout=120) == 0, worker.stderr.read()
    committed_at_the_end = Operation.objects.filter(status="committed").count()

    # The worker stopped cleanly, so it no longer counts as alive: no --force.
    code, out, err = run_command("restore", str(tmp_path / "backup.tar"))

    assert code == 0, err
    assert "all invariants hold" in out
    committed = Operation.objects.filter(status="committed")
    assert 1 <= committed.count() <= committed_at_the_end
    # The copy is consistent: the balance moved by exactly the ledger's entries, and every
    # operation it shows committed has its entry. (An entry whose operation is still in
    # flight is a "decision but no result": a worker verifies it and records it.)
    entries = set(LedgerEntry.objects.values_list("idempotency_key", flat=True))
    assert Account.objects.get(name="B").balance == len(entries)
    assert set(committed.values_list("idempotency_key", flat=True)) <= entries


@sqlite_only
def test_backup_refuses_to_overwrite_and_restore_refuses_a_missing_file(db, tmp_path):
    (tmp_path / "taken").write_text("x")
    with pytest.raises(CommandError, match="already exists"):
        call_command("backup", str(tmp_path / "taken"))
    with pytest.raises(CommandError, match="is not a file"):
        call_command("restore", str(tmp_path / "missing"))


@sqlite_only
@pytest.mark.parametrize(
    ("change", "said"),
    [
        (
            "DELETE FROM django_migrations WHERE app = 'runs' AND name = '0002_commit_engine'",
            "was made by an older version (without migration runs.0002_commit_engine): "
            "restore it with that version, then upgrade",
        ),
        (
            "INSERT INTO django_migrations (app, name, applied) "
            "VALUES ('runs', '9999_from_the_future', '2027-01-01')",
            "was made by a newer version (with migration runs.9999_from_the_future): "
            "restore it with that version",
        ),
        ("DROP TABLE django_migrations", "does not hold an Oversight database"),
    ],
)
def test_restore_refuses_a_backup_of_another_version_and_changes_nothing(
    run, tmp_path, change, said
):
    backup = tmp_path / "backup.tar"
    call_command("backup", str(backup), stdout=StringIO())
    database_changed(backup, lambda database: _execute(database, change))
    start_run(session=run.session, goal="written after the backup", actor=AGENT)

    with pytest.raises(CommandError) as refused:
        call_command("restore", str(backup))

    assert str(refused.value) == f"{backup} {said}"
    assert run.session.runs.filter(goal="written after the backup").exists()


def _execute(database, statement: str) -> None:
    with closing(sqlite3.connect(database)) as other:
        other.execute(statement)
        other.commit()
