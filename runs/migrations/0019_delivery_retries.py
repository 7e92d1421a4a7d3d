"""Alert deliveries are retried for a span of time (``OVERSIGHT_ALERT_RETRY_HOURS``)
instead of a number of attempts, counted from ``retrying_since``: the alert raised, or an
admin's "send again". It defaults to the database's time at insertion, which deliveries
made before this migration take as theirs (PostgreSQL keeps the one value in its
catalogue, without rewriting the table): one still pending retries for the span from
the upgrade."""

import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0018_worker_indexes"),
    ]

    operations = [
        migrations.AddField(
            model_name="alertdelivery",
            name="retrying_since",
            field=models.DateTimeField(
                db_default=django.db.models.functions.datetime.Now(),
                help_text="When its attempts began: the alert raised, or an admin's send "
                "again; in the database's time.",
            ),
        ),
    ]
