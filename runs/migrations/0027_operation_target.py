"""Each operation names what it acts on that others may too (``Action.target``: an
account, a file, a host), and its page lists the others waiting on the same target:
two transfers that each fit may overdraw their account together (#34). Operations still
awaiting a decision are given theirs from their arguments; the others keep none (no page
lists them any more).

The index serves that list. On PostgreSQL it is built ``CONCURRENTLY``, so that agents
can go on proposing while it is built (``_online``): the migration is not atomic, so
each step commits on its own, and each can be taken again (the column is added only if
a run interrupted after adding it has not).
"""

from django.db import migrations, models

from runs.migrations._online import add_index, remove_index

INDEX = models.Index(
    condition=models.Q(("status", "proposed")),
    fields=["project", "target", "created_at"],
    name="operation_target_idx",
)


def _target_field() -> models.CharField:
    field = models.CharField(blank=True, default="", max_length=200)
    field.set_attributes_from_name("target")
    return field


def add_column(apps, schema_editor) -> None:
    Operation = apps.get_model("runs", "Operation")
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        columns = connection.introspection.get_table_description(cursor, Operation._meta.db_table)
    if "target" not in {column.name for column in columns}:
        schema_editor.add_field(Operation, _target_field())


def remove_column(apps, schema_editor) -> None:
    schema_editor.remove_field(apps.get_model("runs", "Operation"), _target_field())


def give_targets(apps, schema_editor) -> None:
    from runs.actions.registry import target_of  # The registered actions name targets.

    Operation = apps.get_model("runs", "Operation")
    for op in Operation.objects.filter(status="proposed").only("action", "arguments"):
        op.target = target_of(op.action, op.arguments)
        op.save(update_fields=["target"])


def create(apps, schema_editor) -> None:
    add_index(schema_editor, apps.get_model("runs", "Operation"), INDEX)


def drop(apps, schema_editor) -> None:
    remove_index(schema_editor, apps.get_model("runs", "Operation"), INDEX)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("runs", "0026_notified_requests")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="operation",
                    name="target",
                    field=models.CharField(blank=True, default="", max_length=200),
                ),
            ],
            database_operations=[migrations.RunPython(add_column, remove_column)],
        ),
        migrations.RunPython(give_targets, migrations.RunPython.noop, atomic=True),
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddIndex(model_name="operation", index=INDEX)],
            database_operations=[migrations.RunPython(create, drop)],
        ),
    ]
