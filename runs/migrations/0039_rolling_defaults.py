"""Database defaults for the columns added since 0.2.0 that are NOT NULL: that release's
processes insert operations, requests and heartbeats without them, and keep working
beside this version's during a rolling upgrade (tests/test_expand_contract.py). On
PostgreSQL each is a SET DEFAULT, a change of the catalogue alone; SQLite copies the
tables."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0038_alert_emails_db_default"),
    ]

    operations = [
        migrations.AlterField(
            model_name="humanrequest",
            name="kind",
            field=models.CharField(
                choices=[
                    ("question", "Question"),
                    ("sign_off", "Sign-off"),
                    ("choice", "Choice"),
                    ("data", "Data"),
                ],
                db_default="sign_off",
                max_length=8,
            ),
        ),
        migrations.AlterField(
            model_name="operation",
            name="gist",
            field=models.CharField(blank=True, db_default="", default="", max_length=200),
        ),
        migrations.AlterField(
            model_name="operation",
            name="lane",
            field=models.CharField(blank=True, db_default="", default="", max_length=300),
        ),
        migrations.AlterField(
            model_name="operation",
            name="target",
            field=models.CharField(blank=True, db_default="", default="", max_length=200),
        ),
        migrations.AlterField(
            model_name="workerheartbeat",
            name="paused_lanes",
            field=models.JSONField(blank=True, db_default={}, default=dict),
        ),
    ]
