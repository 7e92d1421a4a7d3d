"""Upgrading: a database made at the first migration, with data in it, migrates to today's
schema with every checkpoint chain valid and every row it held still there, readable
through today's models and pages; and ``bin/upgrade`` backs up, migrates and verifies, or
stops naming what failed and where the backup is (tests/first_migration.py says where
that database comes from)."""

import io
import re
import shutil
import sqlite3
import subprocess
import tarfile
import zipfile
from collections import Counter
from contextlib import closing
from datetime import timedelta
from pathlib import Path

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.db.models import F
from django.urls import reverse

from runs.audit.evidence import bundle_problems
from runs.canonical import json_hash
from runs.chain import verify_all_chains
from runs.database_copies import _regexp
from runs.models import Alert, AlertDelivery, Checkpoint, Message, Operation
from runs.services.decisions import expire_due_operations
from tests.first_migration import FIXTURE, empty_database, make_first_migration_database
from tests.processes import ROOT, clean_env, manage_in

pytestmark = pytest.mark.timeout(300)

RUNS_ROWS = [row for row in FIXTURE["rows"] if row["model"].startswith("runs.")]
ROWS = Counter(row["model"] for row in RUNS_ROWS)

# A database's schema as it describes it itself: tables, columns, constraints, indexes.
SCHEMA_SQL = {
    "sqlite": "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'",
    "postgresql": """
        SELECT 'constraint', conrelid::regclass::text || '.' || conname,
               pg_get_constraintdef(oid)
        FROM pg_constraint WHERE connamespace = current_schema()::regnamespace
        UNION ALL
        SELECT 'index', indexname, indexdef FROM pg_indexes
        WHERE schemaname = current_schema()
        UNION ALL
        SELECT 'column', table_name || '.' || column_name,
               concat_ws(' ', data_type, is_nullable, column_default)
        FROM information_schema.columns WHERE table_schema = current_schema()
    """,
}


def schema() -> set[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(SCHEMA_SQL[connection.vendor])
        return set(cursor.fetchall())


def command(name: str) -> tuple[int, str]:
    """Run a management command here: its exit status and everything it said."""
    said = io.StringIO()
    try:
        call_command(name, stdout=said, stderr=said)
    except SystemExit as stopped:
        return stopped.code, said.getvalue()
    return 0, said.getvalue()


@pytest.mark.django_db(transaction=True)
def test_a_database_made_at_the_first_migration_upgrades_with_every_chain_valid(client):
    # A new installation made here: an earlier test in this process may have restored a
    # backup into the database, and PostgreSQL writes a restored CHECK differently.
    empty_database()
    call_command("migrate", interactive=False, verbosity=0)
    new_installation = schema()
    try:
        make_first_migration_database()
        call_command("migrate", interactive=False, verbosity=0)
        upgraded = schema()
        # A migration edited after it was released shows here.
        assert (upgraded - new_installation, new_installation - upgraded) == (set(), set())
        assert command("check_invariants") == (0, "all invariants hold\n")
        verified = (
            f"{ROWS['runs.checkpoint']} checkpoints in {ROWS['runs.run']} runs verify, "
            "and 0 admin checkpoints\n"
        )
        assert command("verify_audit_chain") == (0, verified)
        assert_every_row_kept()
        assert_auditors_see_each_chain_hold(client)
        assert_the_product_carries_on()
    finally:
        call_command("migrate", interactive=False, verbosity=0)


def assert_every_row_kept() -> None:
    """Every row, and every value the first migration stored, unchanged (columns
    dropped since excepted); and the columns added since were filled in."""
    assert {label: apps.get_model(label).objects.count() for label in ROWS} == ROWS
    for row in RUNS_ROWS:
        model = apps.get_model(row["model"])
        stored = model.objects.get(pk=row["pk"])
        for name, value in row["fields"].items():
            field = next((f for f in model._meta.concrete_fields if f.name == name), None)
            if field is not None:
                assert getattr(stored, field.attname) == field.to_python(value), (row, name)
    for message in Message.objects.all():
        assert message.payload_sha256 == json_hash(message.payload)
    for operation in Operation.objects.all():
        assert operation.proposed_risk == operation.risk
    assert not Checkpoint.objects.exclude(project=F("run__project")).exists()


def assert_auditors_see_each_chain_hold(client) -> None:
    client.force_login(apps.get_model("auth.User").objects.get(username="auditor"))
    for run in apps.get_model("runs.Run").objects.order_by("pk"):
        seen = client.get(reverse("audit-run", args=[run.pk]))
        if run.project.slug != "demo":  # the auditor is a member of the demo project only
            assert seen.status_code == 404
            continue
        assert seen.status_code == 200
        assert b"The chain holds." in client.get(reverse("audit-verify", args=[run.pk])).content
        bundle = client.get(reverse("audit-evidence", args=[run.pk]))
        archive = zipfile.ZipFile(io.BytesIO(b"".join(bundle.streaming_content)))
        assert bundle_problems(archive) == []


def assert_the_product_carries_on() -> None:
    """Today's code writes onto the old chains and into the old tables."""
    approved = Operation.objects.get(status=Operation.Status.APPROVED)
    assert expire_due_operations(approved.approval_expires_at + timedelta(seconds=1)) == 1
    approved.refresh_from_db()
    assert approved.status == Operation.Status.EXPIRED
    assert list(verify_all_chains()) == []
    # raise_alert queues deliveries as pending; the first migration's constraint on their
    # status named an alert's statuses instead (fixed by runs 0015).
    AlertDelivery.objects.create(
        alert=Alert.objects.get(), channel=AlertDelivery.Channel.EMAIL, target="a@example.com"
    )


# bin/upgrade, end to end, on an installation whose SQLite database the first migration
# made: in a checkout of its own (links to this one's manage.py and .venv) whose bin/setup
# only notes the profile it was given. The real one is no no-op in a checkout set up by
# bin/test: the runtime profile reinstalls the runtime lock into .venv and marks it so,
# and bin/test then reinstalls dev.


@pytest.fixture(scope="module")
def first_installation(tmp_path_factory) -> Path:
    var_dir = tmp_path_factory.mktemp("first-migration")
    make = "import tests.first_migration as f; f.make_first_migration_database()"
    made = manage_in(f'shell --no-imports -c "{make}"', clean_env(var_dir))
    assert made.returncode == 0, made.stderr
    return var_dir


@pytest.fixture
def installation(first_installation, tmp_path) -> Path:
    return shutil.copytree(first_installation, tmp_path / "var")


@pytest.fixture
def checkout(tmp_path) -> Path:
    root = tmp_path / "checkout"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "upgrade").symlink_to(ROOT / "bin" / "upgrade")
    for name in ("manage.py", ".venv"):
        (root / name).symlink_to(ROOT / name)
    setup = root / "bin" / "setup"
    setup.write_text('#!/bin/sh\necho "$1" > "$OVERSIGHT_VAR_DIR/setup-profile"\n')
    setup.chmod(0o755)
    return root


def upgrade(checkout: Path, installation: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [checkout / "bin" / "upgrade"],
        env=clean_env(installation),
        capture_output=True,
        text=True,
        timeout=240,
    )


def sqlite(path: Path, sql: str) -> list[tuple]:
    with closing(sqlite3.connect(path)) as database:
        database.create_function("REGEXP", 2, _regexp, deterministic=True)
        return database.execute(sql).fetchall()


def test_bin_upgrade_backs_up_migrates_and_verifies(checkout, installation):
    done = upgrade(checkout, installation)

    assert done.returncode == 0, done.stderr
    [backup] = (installation / "backups").glob("before-upgrade-*.tar")
    assert re.fullmatch(r"before-upgrade-\d{8}T\d{6}Z\.tar", backup.name)
    assert done.stdout.splitlines() == [
        "upgrade: installing the locked dependencies (runtime)",
        f"upgrade: backing up the database to {backup}",
        "upgrade: migrating",
        "upgrade: checking invariants",
        "upgrade: verifying the audit chain",
        "upgrade: collecting static files",
        f"upgrade: done; the backup is {backup}. Start the web server and the workers.",
    ]
    assert (installation / "setup-profile").read_text() == "runtime\n"
    # The backup holds the database as it was: intact, at the first migration.
    database = installation / "backed-up.sqlite3"
    with tarfile.open(backup) as archive:
        database.write_bytes(archive.extractfile("database.sqlite3").read())
    assert sqlite(database, "PRAGMA integrity_check") == [("ok",)]
    assert sqlite(database, "SELECT name FROM django_migrations WHERE app = 'runs'") == [
        ("0001_initial",)
    ]
    applied = sqlite(installation / "oversight.sqlite3", "SELECT app, name FROM django_migrations")
    assert set(MigrationLoader(None).graph.leaf_nodes()) <= set(applied)
    assert (installation / "staticfiles" / "staticfiles.json").exists()


def test_bin_upgrade_stops_naming_the_broken_chain_and_the_backup(checkout, installation):
    sqlite_edit = "UPDATE runs_checkpoint SET reason = 'edited' WHERE run_id = 1 AND seq = 2"
    with closing(sqlite3.connect(installation / "oversight.sqlite3")) as database:
        database.execute(sqlite_edit)
        database.commit()

    done = upgrade(checkout, installation)

    assert done.returncode == 1
    [backup] = (installation / "backups").glob("before-upgrade-*.tar")
    problems = done.stderr.splitlines()
    assert re.match(r"violation: checkpoint chain broken: run 1, seq 2 .*\(edited\)", problems[0])
    assert problems[-1] == (
        f"upgrade failed: checking invariants; the database as it was before is in {backup}"
    )
    assert done.stdout.splitlines()[-1] == "upgrade: checking invariants"
