"""Retention of the checkpoint history (#37, item 4): a project's retention in days
(none: keep forever, as every project did), and the anchor a history archive leaves in
the database. No existing row changes."""

import django.core.validators
import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0036_worker_pauses'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='project',
            name='history_days',
            field=models.PositiveIntegerField(blank=True, help_text='Finished runs older than this many days are archived and pruned by archive_history', null=True, validators=[django.core.validators.MinValueValidator(1)]),
        ),
        migrations.AddConstraint(
            model_name='project',
            constraint=models.CheckConstraint(condition=models.Q(('history_days__isnull', True), ('history_days__gte', 1), _connector='OR'), name='project_history_days_positive'),
        ),
        migrations.CreateModel(
            name='HistoryArchive',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(help_text="The archive's file name.", max_length=255)),
                ('sha256', models.CharField(help_text='sha256 of the file.', max_length=64, unique=True)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('actor_kind', models.CharField(choices=[('user', 'User'), ('agent', 'Agent'), ('worker', 'Worker'), ('policy', 'Policy')], max_length=8)),
                ('actor_label', models.CharField(max_length=200)),
                ('cut', models.JSONField(help_text="What was asked: --before, or each project's days.")),
                ('first_ended_at', models.DateTimeField()),
                ('last_ended_at', models.DateTimeField()),
                ('runs', models.PositiveIntegerField()),
                ('checkpoints', models.PositiveBigIntegerField()),
                ('heads', models.JSONField(help_text="Each run's id and its chain's head hash.")),
                ('pruned', models.PositiveIntegerField(default=0)),
                ('actor_user', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='history_archives', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'ordering': ['-created_at'],
                'constraints': [models.CheckConstraint(condition=models.Q(('actor_kind__in', ['user', 'agent', 'worker', 'policy'])), name='history_archive_actor_valid')],
            },
        ),
    ]
