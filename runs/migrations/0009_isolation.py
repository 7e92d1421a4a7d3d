"""Isolation (#11): a session knows the token that opened it, an operation the token
that proposed it and the rule that set its approvals; media types move from the
shared blob to each reference; policies get conditions and a minimum risk."""

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def backfill(apps, schema_editor):
    CheckpointArtifact = apps.get_model("runs", "CheckpointArtifact")
    Artifact = apps.get_model("runs", "Artifact")
    Session = apps.get_model("runs", "Session")
    AgentToken = apps.get_model("runs", "AgentToken")
    Operation = apps.get_model("runs", "Operation")
    CheckpointArtifact.objects.update(
        media_type=Subquery(
            Artifact.objects.filter(pk=OuterRef("artifact_id")).values("media_type")[:1]
        )
    )
    # A session's token is the one whose name the checkpoints of its runs were written
    # under (the API writes "run.created" as the calling token). The session's own
    # "agent" label is free text an agent chose: never trusted to name a token. A
    # session with no run yet stays without a token: its agent opens a new one.
    Checkpoint = apps.get_model("runs", "Checkpoint")
    creator = Checkpoint.objects.filter(
        run__session=OuterRef(OuterRef("pk")), event="run.created", actor_kind="agent"
    ).order_by("pk")
    Session.objects.filter(token__isnull=True).update(
        token=Subquery(
            AgentToken.objects.filter(
                project_id=OuterRef("project_id"),
                name=Subquery(creator.values("actor_label")[:1]),
            )
            .values("pk")[:1]
        )
    )
    Operation.objects.update(
        proposed_risk=models.F("risk"),
        proposed_by_token=Subquery(
            Session.objects.filter(runs=OuterRef("run_id")).values("token_id")[:1]
        ),
    )


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0008_drop_unfinished_replays'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='approvalpolicy',
            name='policy_unique_action',
        ),
        migrations.AddField(
            model_name='approvalpolicy',
            name='min_risk',
            field=models.CharField(blank=True, choices=[('low', 'Low'), ('medium', 'Medium'), ('high', 'High')], help_text="Blank: the agent's risk.", max_length=8),
        ),
        migrations.AddField(
            model_name='approvalpolicy',
            name='when_argument',
            field=models.CharField(blank=True, help_text="An argument, dotted for nested ones (e.g. 'amount'). Blank: always.", max_length=200),
        ),
        migrations.AddField(
            model_name='approvalpolicy',
            name='when_operator',
            field=models.CharField(blank=True, choices=[('gt', '>'), ('gte', '≥'), ('lt', '<'), ('lte', '≤'), ('eq', '='), ('ne', '≠')], max_length=3),
        ),
        migrations.AddField(
            model_name='approvalpolicy',
            name='when_value',
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='checkpointartifact',
            name='media_type',
            field=models.CharField(default='application/octet-stream', max_length=200),
        ),
        migrations.AddField(
            model_name='message',
            name='author_kind',
            field=models.CharField(blank=True, choices=[('user', 'User'), ('agent', 'Agent'), ('worker', 'Worker'), ('policy', 'Policy')], max_length=8),
        ),
        migrations.AddField(
            model_name='operation',
            name='approval_rule',
            field=models.CharField(blank=True, help_text='The policy rule that set risk and approvals.', max_length=300),
        ),
        migrations.AddField(
            model_name='operation',
            name='proposed_by_token',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='proposals', to='runs.agenttoken'),
        ),
        migrations.AddField(
            model_name='operation',
            name='proposed_risk',
            field=models.CharField(blank=True, choices=[('low', 'Low'), ('medium', 'Medium'), ('high', 'High')], max_length=8),
        ),
        migrations.AddField(
            model_name='project',
            name='alerts_pause_agent',
            field=models.BooleanField(default=False, help_text="While an alert is open on one of an agent's runs, that agent's other runs in this project take no new proposals or claims."),
        ),
        migrations.AddField(
            model_name='session',
            name='token',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='sessions', to='runs.agenttoken'),
        ),
        migrations.AddConstraint(
            model_name='approvalpolicy',
            constraint=models.UniqueConstraint(condition=models.Q(('when_argument', '')), fields=('project', 'action'), name='policy_unique_action'),
        ),
        migrations.AddConstraint(
            model_name='approvalpolicy',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('when_argument', ''), ('when_operator', '')), models.Q(models.Q(('when_argument', ''), _negated=True), models.Q(('when_operator', ''), _negated=True)), _connector='OR'), name='policy_condition_complete'),
        ),
        migrations.AddConstraint(
            model_name='approvalpolicy',
            constraint=models.CheckConstraint(condition=models.Q(('min_risk', ''), ('min_risk__in', ['low', 'medium', 'high']), _connector='OR'), name='policy_min_risk_valid'),
        ),
        migrations.AddIndex(
            model_name="apireplay",
            index=models.Index(fields=["created_at"], name="replay_created_idx"),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
        migrations.RemoveField(model_name="artifact", name="media_type"),
    ]
