"""Indexes for what a worker looks for at every step, so that it reads what is due
instead of every operation ever proposed.

- Approvals that lapse (``expire_due_operations``) had no index: with 60,000 operations
  in the history, each look read all of them (SQLite 19–28 ms, PostgreSQL most of a
  40 ms step), once a second per worker. ``operation_approval_due_idx`` serves them,
  and on SQLite the claim's approved operations too.
- ``operation_lease_idx``, on the lease's expiry where the status is in flight or
  verify_failed, served PostgreSQL; SQLite cannot tell that a status list in a query
  matches one in an index's condition, so the claim and the sweep of agents' expired
  leases read every operation there (10–15 ms each at 60,000). An operation has an
  expiry only while leased (leaving a lease clears it), so an index on status and
  expiry where there is one serves both backends, and stays small.

On PostgreSQL both are built, and the old one dropped, without stopping writers
(``_online``).
"""

from django.db import migrations, models

from runs.migrations._online import add_index, remove_index

APPROVAL_DUE = models.Index(
    condition=models.Q(("status", "approved")),
    fields=["approval_expires_at"],
    name="operation_approval_due_idx",
)
LEASED = models.Index(
    condition=models.Q(("lease_expires_at__isnull", False)),
    fields=["status", "lease_expires_at"],
    name="operation_leased_idx",
)
OLD_LEASE = models.Index(
    condition=models.Q(("status__in", ["in_flight", "verify_failed"])),
    fields=["lease_expires_at"],
    name="operation_lease_idx",
)


def create(apps, schema_editor) -> None:
    operation = apps.get_model("runs", "Operation")
    add_index(schema_editor, operation, APPROVAL_DUE)
    add_index(schema_editor, operation, LEASED)
    remove_index(schema_editor, operation, OLD_LEASE)


def drop(apps, schema_editor) -> None:
    operation = apps.get_model("runs", "Operation")
    add_index(schema_editor, operation, OLD_LEASE)
    remove_index(schema_editor, operation, LEASED)
    remove_index(schema_editor, operation, APPROVAL_DUE)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("runs", "0017_operation_queue_index"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="operation", name=OLD_LEASE.name),
                migrations.AddIndex(model_name="operation", index=APPROVAL_DUE),
                migrations.AddIndex(model_name="operation", index=LEASED),
            ],
            database_operations=[migrations.RunPython(create, drop)],
        ),
    ]
