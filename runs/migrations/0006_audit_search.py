"""The audit search: each checkpoint carries its run's project (so the search reads one
table) and indexes for its selective filters."""

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def copy_run_project(apps, schema_editor) -> None:
    Checkpoint = apps.get_model("runs", "Checkpoint")
    Run = apps.get_model("runs", "Run")
    Checkpoint.objects.update(
        project_id=Subquery(Run.objects.filter(pk=OuterRef("run_id")).values("project_id")[:1])
    )


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0005_message_retention"),
    ]

    operations = [
        migrations.AddField(
            model_name="checkpoint",
            name="project",
            field=models.ForeignKey(
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="checkpoints",
                to="runs.project",
            ),
        ),
        migrations.RunPython(copy_run_project, migrations.RunPython.noop, elidable=True),
        migrations.AlterField(
            model_name="checkpoint",
            name="project",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="checkpoints",
                to="runs.project",
            ),
        ),
        migrations.AddIndex(
            model_name="checkpoint",
            index=models.Index(
                fields=["actor_label", "-created_at", "-id"], name="checkpoint_actor_idx"
            ),
        ),
        migrations.AddIndex(
            model_name="checkpoint",
            index=models.Index(
                fields=["to_status", "-created_at", "-id"], name="checkpoint_status_idx"
            ),
        ),
        migrations.AddIndex(
            model_name="checkpoint",
            index=models.Index(fields=["event", "-created_at", "-id"], name="checkpoint_event_idx"),
        ),
    ]
