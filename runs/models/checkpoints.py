from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from runs.actors import ActorKind
from runs.models.artifacts import Artifact
from runs.models.choices import choices_constraint
from runs.models.operations import Operation
from runs.models.projects import Project
from runs.models.requests import HumanRequest
from runs.models.runs import Run


class Checkpoint(models.Model):
    """A durable recovery point, written in the same transaction as the state change it
    records. Append-only: ``hash`` covers every other column and ``prev_hash`` the
    run's previous checkpoint, so an edited or removed row breaks the chain."""

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="checkpoints")
    # The run's project, copied here so that the audit search, which always filters on
    # the viewer's projects, reads one table and one index (checkpoint_recent_idx)
    # instead of joining runs. Not indexed on its own on purpose: an index on it would
    # tempt SQLite's planner to fetch a whole project and sort it. check_invariants
    # checks it agrees with the run.
    project = models.ForeignKey(
        Project, on_delete=models.PROTECT, related_name="checkpoints", db_index=False
    )
    seq = models.PositiveIntegerField()
    created_at = models.DateTimeField(default=timezone.now)
    actor_kind = models.CharField(max_length=8, choices=ActorKind.choices)
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="checkpoints",
    )
    actor_label = models.CharField(max_length=200)
    operation = models.ForeignKey(
        Operation, null=True, blank=True, on_delete=models.PROTECT, related_name="checkpoints"
    )
    request = models.ForeignKey(
        HumanRequest, null=True, blank=True, on_delete=models.PROTECT, related_name="checkpoints"
    )
    event = models.CharField(max_length=48)
    from_status = models.CharField(max_length=24, blank=True)
    to_status = models.CharField(max_length=24)
    reason = models.TextField(blank=True)
    state = models.JSONField(help_text="The state needed to continue from here.")
    artifacts = models.ManyToManyField(
        Artifact, through="CheckpointArtifact", related_name="checkpoints"
    )
    prev_hash = models.CharField(max_length=64, blank=True)
    hash = models.CharField(max_length=64, unique=True)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="checkpoint_unique_seq"),
            models.CheckConstraint(condition=models.Q(seq__gte=1), name="checkpoint_seq_positive"),
            choices_constraint("actor_kind", ActorKind, "checkpoint_actor_valid"),
            models.CheckConstraint(
                condition=~models.Q(actor_kind="user") | models.Q(actor_user__isnull=False),
                name="checkpoint_user_actor_named",
            ),
        ]
        indexes = [
            models.Index(fields=["-created_at", "-id"], name="checkpoint_recent_idx"),
            models.Index(fields=["operation", "seq"], name="checkpoint_operation_idx"),
            models.Index(fields=["actor_user", "-created_at"], name="checkpoint_user_idx"),
            # The audit search's selective filters, each in the page order.
            models.Index(fields=["actor_label", "-created_at", "-id"], name="checkpoint_actor_idx"),
            models.Index(fields=["to_status", "-created_at", "-id"], name="checkpoint_status_idx"),
            models.Index(fields=["event", "-created_at", "-id"], name="checkpoint_event_idx"),
        ]

    def __str__(self) -> str:
        return f"checkpoint {self.run_id}#{self.seq} {self.event}"

    def save(self, *args, **kwargs) -> None:
        if not self._state.adding:
            raise ValidationError("checkpoints are append-only")
        super().save(*args, **kwargs)


class CheckpointArtifact(models.Model):
    """The artifact version (by name) that a checkpoint introduced."""

    checkpoint = models.ForeignKey(
        Checkpoint, on_delete=models.PROTECT, related_name="artifact_refs"
    )
    artifact = models.ForeignKey(Artifact, on_delete=models.PROTECT, related_name="refs")
    name = models.CharField(max_length=500)
    # Name and media type belong to the reference: projects that store the same bytes
    # share the blob, never what another project said about it.
    media_type = models.CharField(max_length=200, default="application/octet-stream")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["checkpoint", "name"], name="checkpoint_artifact_name")
        ]

    def __str__(self) -> str:
        return f"{self.name} @ {self.artifact.sha256[:12]}"
