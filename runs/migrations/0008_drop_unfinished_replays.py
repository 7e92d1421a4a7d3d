"""Drop the reservations an earlier ``IdempotencyKeyMiddleware`` committed before its
request finished (status 0). The middleware now commits a key only together with its
reply, so it would replay such a row as an answer with no status; dropping it lets the
retry run, as the old middleware's takeover of an abandoned reservation did."""

from django.db import migrations


def drop_unfinished(apps, schema_editor):
    apps.get_model("runs", "ApiReplay").objects.filter(status=0).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0007_failure_semantics"),
    ]

    operations = [
        migrations.RunPython(drop_unfinished, migrations.RunPython.noop, elidable=True),
    ]
