"""Message retention: every message keeps the sha256 of its payload, so that the payload
can later be redacted (``redacted_at``) while the hash stays."""

from django.db import migrations, models

from runs.canonical import json_hash

BATCH = 1000


def backfill_payload_sha256(apps, schema_editor) -> None:
    """Hash existing payloads a batch at a time (keyset on pk, bounded memory)."""
    Message = apps.get_model("runs", "Message")
    last = 0
    while batch := list(
        Message.objects.filter(pk__gt=last).order_by("pk").only("pk", "payload")[:BATCH]
    ):
        for message in batch:
            message.payload_sha256 = json_hash(message.payload)
        Message.objects.bulk_update(batch, ["payload_sha256"])
        last = batch[-1].pk


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0004_agent_api"),
    ]

    operations = [
        migrations.AddField(
            model_name="message",
            name="payload_sha256",
            field=models.CharField(
                default="",
                editable=False,
                help_text="sha256 of the canonical JSON payload.",
                max_length=64,
            ),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="message",
            name="redacted_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.RunPython(backfill_payload_sha256, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(
                condition=models.Q(("redacted_at__isnull", True)),
                fields=["run", "created_at"],
                name="message_unredacted_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="message",
            constraint=models.CheckConstraint(
                condition=models.Q(("payload_sha256", ""), _negated=True),
                name="message_has_payload_hash",
            ),
        ),
        migrations.AddConstraint(
            model_name="message",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("redacted_at__isnull", True),
                    models.Q(("payload__has_key", "redacted"), ("payload__redacted", True)),
                    _connector="OR",
                ),
                name="message_redacted_has_marker",
            ),
        ),
    ]
