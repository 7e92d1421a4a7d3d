"""Upgrading: a database made at the first migration, with data in it, migrates to today's
schema with every checkpoint chain valid and every row it held still there, readable
through today's models and pages (tests/first_migration.py says where that database
comes from)."""

import io
import zipfile
from collections import Counter
from datetime import timedelta

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import connection
from django.db.models import F
from django.urls import reverse

from runs.audit.evidence import bundle_problems
from runs.canonical import json_hash
from runs.chain import verify_all_chains
from runs.models import Alert, AlertDelivery, Checkpoint, Message, Operation
from runs.services.decisions import expire_due_operations
from tests.first_migration import FIXTURE, make_first_migration_database

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
    new_installation = schema()
    try:
        make_first_migration_database()
        call_command("migrate", interactive=False, verbosity=0)
        upgraded = schema()
        # A migration edited after it was released shows here.
        assert (upgraded - new_installation, new_installation - upgraded) == (set(), set())
        assert command("check_invariants") == (0, "all invariants hold\n")
        verified = f"{ROWS['runs.checkpoint']} checkpoints in {ROWS['runs.run']} runs verify\n"
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
    # status named an alert's statuses instead (fixed by runs 0014).
    AlertDelivery.objects.create(
        alert=Alert.objects.get(), channel=AlertDelivery.Channel.EMAIL, target="a@example.com"
    )
