"""Slack (#36): a project's channel, people's linked Slack users and their one-time
link codes, and one message per waiting operation or request. New tables only: nothing
existing is touched."""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0031_quiet_hours'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='SlackChannel',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('channel', models.CharField(help_text="The channel's id, e.g. C0123456789 (the bot must be in it).", max_length=32)),
                ('project', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='slack', to='runs.project')),
            ],
        ),
        migrations.CreateModel(
            name='SlackLinkCode',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('digest', models.CharField(max_length=64, unique=True)),
                ('expires_at', models.DateTimeField()),
                ('user', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='slack_link_code', to=settings.AUTH_USER_MODEL)),
            ],
        ),
        migrations.CreateModel(
            name='SlackIdentity',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('team', models.CharField(max_length=32)),
                ('slack_user', models.CharField(max_length=32)),
                ('linked_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ('user', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='slack_identity', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name_plural': 'Slack identities',
                'constraints': [models.UniqueConstraint(fields=('team', 'slack_user'), name='slack_identity_once')],
            },
        ),
        migrations.CreateModel(
            name='SlackMessage',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('channel', models.CharField(max_length=32)),
                ('ts', models.CharField(blank=True, default='', max_length=32)),
                ('state', models.CharField(choices=[('to_post', 'To Post'), ('posted', 'Posted'), ('to_update', 'To Update'), ('done', 'Done'), ('failed', 'Failed')], default='to_post', max_length=16)),
                ('outcome', models.CharField(blank=True, default='', max_length=300)),
                ('attempts', models.PositiveSmallIntegerField(default=0)),
                ('next_attempt_at', models.DateTimeField(blank=True, db_default=django.db.models.functions.datetime.Now(), null=True)),
                ('last_error', models.TextField(blank=True, default='')),
                ('operation', models.OneToOneField(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='slack_message', to='runs.operation')),
                ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='runs.project')),
                ('request', models.OneToOneField(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='slack_message', to='runs.humanrequest')),
            ],
            options={
                'indexes': [models.Index(condition=models.Q(('state__in', ['to_post', 'to_update'])), fields=['next_attempt_at'], name='slack_message_due_idx'), models.Index(condition=models.Q(('state', 'posted')), fields=['id'], name='slack_message_posted_idx')],
                'constraints': [models.CheckConstraint(condition=models.Q(('operation__isnull', True), ('request__isnull', True), _connector='XOR'), name='slack_message_one_item'), models.CheckConstraint(condition=models.Q(('state__in', ['to_post', 'posted', 'to_update', 'done', 'failed'])), name='slack_message_state_valid')],
            },
        ),
    ]
