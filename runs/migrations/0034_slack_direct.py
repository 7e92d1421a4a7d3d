"""Slack direct messages (#36): a person's choice of them on their preferences (off
for everyone), and a message's recipient. A message's links to its operation or request
become foreign keys (an item has its channel's message and one per recipient), kept
unique where they were by partial constraints, which also index them. The quiet hours'
help names both channels. No existing row changes: each message stays its channel's."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0033_sign_in'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='preferences',
            name='slack_direct',
            field=models.BooleanField(db_default=False, help_text='Also message me directly in Slack when operations or requests wait for my decision (your Slack user must be linked).'),
        ),
        migrations.AddField(
            model_name='slackmessage',
            name='recipient',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AlterField(
            model_name='preferences',
            name='quiet_from',
            field=models.TimeField(blank=True, help_text='No emails or Slack messages about waiting work from this time, in your time zone; what waited comes after them. Alerts to admins still come at any hour.', null=True, verbose_name='quiet hours from'),
        ),
        migrations.AlterField(
            model_name='slackmessage',
            name='operation',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='slack_messages', to='runs.operation'),
        ),
        migrations.AlterField(
            model_name='slackmessage',
            name='request',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='slack_messages', to='runs.humanrequest'),
        ),
        migrations.AddConstraint(
            model_name='slackmessage',
            constraint=models.UniqueConstraint(condition=models.Q(('recipient__isnull', True)), fields=('operation',), name='slack_message_operation_in_channel'),
        ),
        migrations.AddConstraint(
            model_name='slackmessage',
            constraint=models.UniqueConstraint(condition=models.Q(('recipient__isnull', True)), fields=('request',), name='slack_message_request_in_channel'),
        ),
        migrations.AddConstraint(
            model_name='slackmessage',
            constraint=models.UniqueConstraint(fields=('operation', 'recipient'), name='slack_message_operation_direct'),
        ),
        migrations.AddConstraint(
            model_name='slackmessage',
            constraint=models.UniqueConstraint(fields=('request', 'recipient'), name='slack_message_request_direct'),
        ),
    ]
