from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0037_history_archive"),
    ]

    operations = [
        migrations.AlterField(
            model_name="project",
            name="alert_emails",
            field=models.JSONField(
                blank=True,
                db_default=[],
                default=list,
                help_text="Addresses told of every alert of this project, besides its admins "
                "(e.g. an on-call list): a JSON list.",
            ),
        ),
    ]
