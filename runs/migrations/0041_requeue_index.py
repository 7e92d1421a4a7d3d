"""An index of operations' requeues (runs 0040), holding only the operations that are
requeues: SQLite looks for the requeues of a new operation at every insert into the
table (a foreign key to itself, checked at commit), and read the whole table without
it. On PostgreSQL it is built ``CONCURRENTLY`` (``_online``), so that agents go on
proposing meanwhile: the migration is not atomic, and can be run again."""

from django.db import migrations, models

from runs.migrations._online import add_index, remove_index

INDEX = models.Index(
    condition=models.Q(("requeue_of__isnull", False)),
    fields=["requeue_of"],
    name="operation_requeue_of_idx",
)


def create(apps, schema_editor) -> None:
    add_index(schema_editor, apps.get_model("runs", "Operation"), INDEX)


def drop(apps, schema_editor) -> None:
    remove_index(schema_editor, apps.get_model("runs", "Operation"), INDEX)


class Migration(migrations.Migration):
    atomic = False
    dependencies = [("runs", "0040_requeues")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddIndex(model_name="operation", index=INDEX)],
            database_operations=[migrations.RunPython(create, drop)],
        ),
    ]
