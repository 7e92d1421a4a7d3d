"""Each operation says what it would do in one line (``Action.gist``), for the queue's
rows. Operations still awaiting a decision are given theirs from their arguments; the
others keep none (the queue no longer shows them)."""

from django.db import migrations, models


def give_gists(apps, schema_editor) -> None:
    from runs.actions.registry import gist_of  # The registered actions say their gists.

    Operation = apps.get_model("runs", "Operation")
    for op in Operation.objects.filter(status="proposed").only("action", "arguments"):
        op.gist = gist_of(op.action, op.arguments)
        op.save(update_fields=["gist"])


class Migration(migrations.Migration):
    dependencies = [("runs", "0024_request_kinds")]

    operations = [
        migrations.AddField(
            model_name="operation",
            name="gist",
            field=models.CharField(blank=True, default="", max_length=200),
        ),
        migrations.RunPython(give_gists, migrations.RunPython.noop),
    ]
