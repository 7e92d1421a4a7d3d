"""The approvals queue's index: pending operations oldest first across projects, so
that /approvals/ reads its first 100 rows instead of sorting every pending operation
(10,000 pending on PostgreSQL: the queue's query 55 -> 7 ms).

On PostgreSQL it is built ``CONCURRENTLY``, outside a transaction, so that agents can
go on proposing while it is built (see 0016); an invalid index a failed attempt left
behind is dropped first.
"""

from django.db import migrations, models

INDEX = models.Index(
    condition=models.Q(("status", "proposed")),
    fields=["created_at", "id"],
    name="operation_queue_idx",
)


def create(apps, schema_editor) -> None:
    operation = apps.get_model("runs", "Operation")
    if schema_editor.connection.vendor != "postgresql":
        return schema_editor.add_index(operation, INDEX)
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX.name}")
    schema_editor.add_index(operation, INDEX, concurrently=True)


def drop(apps, schema_editor) -> None:
    operation = apps.get_model("runs", "Operation")
    if schema_editor.connection.vendor != "postgresql":
        return schema_editor.remove_index(operation, INDEX)
    schema_editor.remove_index(operation, INDEX, concurrently=True)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("runs", "0016_checkpoint_text_trigrams"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddIndex(model_name="operation", index=INDEX)],
            database_operations=[migrations.RunPython(create, drop)],
        ),
    ]
