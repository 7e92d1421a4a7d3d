"""Quiet hours on a person's preferences (#36): two nullable columns and the check that
holds them both or neither. Every row gets neither, so nothing changes for anyone until
they set their hours on /account/."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0030_webhooks"),
    ]

    operations = [
        migrations.AddField(
            model_name="preferences",
            name="quiet_from",
            field=models.TimeField(
                blank=True,
                help_text="No emails about waiting work from this time, in your time zone; "
                "what waited is in your first email after. Alerts to admins still come at "
                "any hour.",
                null=True,
                verbose_name="quiet hours from",
            ),
        ),
        migrations.AddField(
            model_name="preferences",
            name="quiet_until",
            field=models.TimeField(
                blank=True,
                help_text="The time they end, the next day if earlier (22:00 to 07:00). "
                "Leave both empty for no quiet hours.",
                null=True,
                verbose_name="quiet hours until",
            ),
        ),
        migrations.AddConstraint(
            model_name="preferences",
            constraint=models.CheckConstraint(
                condition=models.Q(quiet_from__isnull=True, quiet_until__isnull=True)
                | (
                    models.Q(quiet_from__isnull=False, quiet_until__isnull=False)
                    & ~models.Q(quiet_from=models.F("quiet_until"))
                ),
                name="preferences_quiet_hours_both_or_neither",
            ),
        ),
    ]
