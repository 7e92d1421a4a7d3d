"""An operator requeues an operation whose effect did not happen (runs.services.requeues).
Columns NULL-able or with a database default, and no index: on PostgreSQL each is a
change of the catalogue (the foreign keys check a column of NULLs), and the previous
release's processes write on."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0039_rolling_defaults'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='operation',
            options={'permissions': [('decide_operation', 'Can approve, reject or edit operations'), ('requeue_operation', 'Can propose again an operation whose effect did not happen')]},
        ),
        migrations.AddField(
            model_name='operation',
            name='requeue_of',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.RESTRICT, related_name='requeues', to='runs.operation'),
        ),
        migrations.AddField(
            model_name='operation',
            name='requeue_reason',
            field=models.TextField(blank=True, db_default='', default=''),
        ),
        migrations.AddField(
            model_name='operation',
            name='requeued_by',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL),
        ),
    ]
