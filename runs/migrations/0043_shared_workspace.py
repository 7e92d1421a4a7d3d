"""The mark of file.write's shared workspace, and why a worker runs no file.write
(``runs.shared_workspace``). The column has a constant default (the catalogue alone,
on PostgreSQL); workers of the previous release leave it "" (they check nothing)."""

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0042_operation_proposed_hash'),
    ]

    operations = [
        migrations.AddField(
            model_name='workerheartbeat',
            name='workspace_refused',
            field=models.TextField(blank=True, db_default='', default=''),
        ),
        migrations.CreateModel(
            name='SharedWorkspace',
            fields=[
                ('id', models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False)),
                ('mark', models.CharField(max_length=64)),
                ('recorded_by', models.CharField(max_length=200)),
                ('recorded_at', models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                'constraints': [models.CheckConstraint(condition=models.Q(('id', 1)), name='one_workspace'), models.CheckConstraint(condition=models.Q(('mark__regex', '^[0-9a-f]{32}$')), name='workspace_mark_hex')],
            },
        ),
    ]
