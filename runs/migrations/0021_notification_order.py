"""Which operations a reviewer's emails have listed is remembered operation by operation
(``NotifiedOperation``) instead of by a ``created_at`` watermark, which skipped forever a
proposal that committed (on PostgreSQL) after a later one was emailed. The waiting
operations each reviewer's watermark had passed are carried over as listed, so the
upgrade lists nothing twice."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def carry_over(apps, schema_editor) -> None:
    Preferences = apps.get_model("runs", "Preferences")
    Operation = apps.get_model("runs", "Operation")
    NotifiedOperation = apps.get_model("runs", "NotifiedOperation")
    for preferences in Preferences.objects.exclude(last_notified_at=None).iterator():
        passed = Operation.objects.filter(
            status="proposed",
            created_at__lte=preferences.last_notified_at,
            project__memberships__user=preferences.user_id,
        ).distinct()
        NotifiedOperation.objects.bulk_create(
            (
                NotifiedOperation(user_id=preferences.user_id, operation_id=pk)
                for pk in passed.values_list("pk", flat=True).iterator()
            ),
            batch_size=1000,
        )


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0020_feed_numbered_on_read"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="NotifiedOperation",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "operation",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="runs.operation",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("user", "operation"), name="notified_unique")
                ],
            },
        ),
        migrations.RunPython(carry_over, migrations.RunPython.noop),
    ]
