"""Signed webhooks per project (#36): endpoints, the events they want, and one delivery
per endpoint and event. New tables only: nothing existing changes, and no endpoint
exists until an admin adds one, so nothing is sent after the upgrade until then."""

import uuid

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0029_external_id_per_token"),
    ]

    operations = [
        migrations.CreateModel(
            name="WebhookEndpoint",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "name",
                    models.CharField(
                        help_text="Whose tool it is, e.g. “Teams bot”.", max_length=100
                    ),
                ),
                ("url", models.URLField(max_length=2000)),
                (
                    "events",
                    models.JSONField(
                        blank=True, default=list, help_text="The event kinds it wants."
                    ),
                ),
                ("salt", models.CharField(editable=False, max_length=64)),
                ("active", models.BooleanField(default=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "project",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="webhooks",
                        to="runs.project",
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="WebhookEvent",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("operation.waiting", "Operation Waiting"),
                            ("request.waiting", "Request Waiting"),
                            ("decided", "Decided"),
                            ("alert.raised", "Alert Raised"),
                        ],
                        max_length=24,
                    ),
                ),
                ("data", models.JSONField()),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                (
                    "project",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="runs.project",
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="WebhookDelivery",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("delivery_id", models.UUIDField(default=uuid.uuid4, editable=False, unique=True)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("pending", "Pending"),
                            ("delivered", "Delivered"),
                            ("failed", "Failed"),
                        ],
                        default="pending",
                        max_length=16,
                    ),
                ),
                ("attempts", models.PositiveSmallIntegerField(default=0)),
                (
                    "next_attempt_at",
                    models.DateTimeField(
                        blank=True, db_default=django.db.models.functions.datetime.Now(), null=True
                    ),
                ),
                ("last_status", models.PositiveSmallIntegerField(blank=True, null=True)),
                ("last_error", models.TextField(blank=True, default="")),
                ("delivered_at", models.DateTimeField(blank=True, null=True)),
                (
                    "endpoint",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="deliveries",
                        to="runs.webhookendpoint",
                    ),
                ),
                (
                    "event",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="deliveries",
                        to="runs.webhookevent",
                    ),
                ),
            ],
            options={
                "verbose_name_plural": "webhook deliveries",
            },
        ),
        migrations.AddConstraint(
            model_name="webhookendpoint",
            constraint=models.UniqueConstraint(
                fields=("project", "name"), name="webhook_unique_name"
            ),
        ),
        migrations.AddConstraint(
            model_name="webhookevent",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "kind__in",
                        ["operation.waiting", "request.waiting", "decided", "alert.raised"],
                    )
                ),
                name="webhook_event_kind_valid",
            ),
        ),
        migrations.AddIndex(
            model_name="webhookdelivery",
            index=models.Index(
                condition=models.Q(("status", "pending")),
                fields=["endpoint", "next_attempt_at"],
                name="webhook_delivery_due_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="webhookdelivery",
            constraint=models.UniqueConstraint(
                fields=("endpoint", "event"), name="webhook_delivery_once"
            ),
        ),
        migrations.AddConstraint(
            model_name="webhookdelivery",
            constraint=models.CheckConstraint(
                condition=models.Q(("status__in", ["pending", "delivered", "failed"])),
                name="webhook_delivery_status_valid",
            ),
        ),
    ]
