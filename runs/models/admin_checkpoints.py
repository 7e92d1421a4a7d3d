from django.conf import settings
from django.db import models
from django.utils import timezone

from runs.actors import ActorKind
from runs.models.choices import choices_constraint
from runs.models.projects import Project


class AdminCheckpoint(models.Model):
    """A checkpoint of an act on the installation rather than on a run: a configuration
    file applied, workers paused or resumed, history archived, a restore confirmed.
    Append-only and hash-chained like a run's checkpoints, in one chain for the whole
    installation (``runs.services.admin_record`` writes it, ``runs.chain`` verifies it)."""

    seq = models.PositiveIntegerField(unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    actor_kind = models.CharField(max_length=8, choices=ActorKind.choices)
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="admin_checkpoints",
    )
    actor_label = models.CharField(max_length=200)
    # The project it concerns; null for the installation as a whole.
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.PROTECT, related_name="admin_checkpoints"
    )
    event = models.CharField(max_length=48)
    detail = models.JSONField(default=dict)
    prev_hash = models.CharField(max_length=64, blank=True)
    hash = models.CharField(max_length=64, unique=True)

    class Meta:
        ordering = ["seq"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(seq__gte=1), name="admin_checkpoint_seq_positive"
            ),
            choices_constraint("actor_kind", ActorKind, "admin_checkpoint_actor_valid"),
        ]
        indexes = [
            models.Index(fields=["project", "-seq"], name="admin_checkpoint_project_idx"),
        ]

    def __str__(self) -> str:
        return f"admin checkpoint {self.seq} {self.event}"
