"""The alert deliveries' status constraint, made again. The first migration as released
(commit c632985) checked a delivery's status against an alert's statuses (open,
acknowledged, resolved); 0001_initial was then corrected in place, which databases
created before never saw. On them every delivery raise_alert queues (pending) fails its
CHECK, and with it the alert. Dropping and adding the constraint by name gives every
database the one the models declare; on the others it changes nothing. Deliveries that
old constraint allowed were never written: nothing delivered alerts before 0002."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0014_operation_durations"),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="alertdelivery", name="delivery_status_valid"),
        migrations.AddConstraint(
            model_name="alertdelivery",
            constraint=models.CheckConstraint(
                condition=models.Q(("status__in", ["pending", "delivered", "failed"])),
                name="delivery_status_valid",
            ),
        ),
    ]
