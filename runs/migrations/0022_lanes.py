"""Lanes (#33): each operation names the target its effect waits on, so that a worker
claims nothing of a lane that is full or whose target stopped answering; each worker
says which lanes it paused. Operations still open are given their lane from their
arguments; ended ones keep none (nothing claims them again)."""

from django.db import migrations, models

OPEN = ("proposed", "approved", "in_flight", "verify_failed")


def name_lanes(apps, schema_editor) -> None:
    from runs.actions.registry import lane_of  # The registered actions say their lanes.

    Operation = apps.get_model("runs", "Operation")
    for op in Operation.objects.filter(status__in=OPEN).only(
        "action", "arguments", "project_id"
    ):
        op.lane = lane_of(op.action, op.arguments, op.project_id)
        op.save(update_fields=["lane"])


class Migration(migrations.Migration):
    dependencies = [("runs", "0021_notification_order")]

    operations = [
        migrations.AddField(
            model_name="operation",
            name="lane",
            field=models.CharField(blank=True, default="", max_length=300),
        ),
        migrations.AddField(
            model_name="workerheartbeat",
            name="paused_lanes",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.RunPython(name_lanes, migrations.RunPython.noop),
    ]
