"""Open human requests join the reviewers' batched emails, remembered request by request
as operations are (``NotifiedRequest``). Nothing is carried over: no email has listed a
request before, so the requests open at the upgrade are listed by the next one."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0025_operation_gist"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name="preferences",
            name="notify_pending",
            field=models.BooleanField(
                default=True,
                help_text="Email me, batched, when operations or requests wait for my decision.",
            ),
        ),
        migrations.CreateModel(
            name="NotifiedRequest",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "request",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="runs.humanrequest",
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
                    models.UniqueConstraint(
                        fields=("user", "request"), name="notified_request_unique"
                    )
                ],
            },
        ),
    ]
