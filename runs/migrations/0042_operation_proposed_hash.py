"""The hash of what the agent proposed, beside that of what was approved: the same call
made again is found by either in one indexed query (``runs.services.repeats``). On
PostgreSQL adding a column with a constant default changes the catalogue alone; older
rows keep "" and are found by their approved arguments only."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0041_requeue_index'),
    ]

    operations = [
        migrations.AddField(
            model_name='operation',
            name='proposed_hash',
            field=models.CharField(blank=True, db_default='', default='', max_length=64),
        ),
    ]
