from django.conf import settings
from django.db import models
from django.utils import timezone

from runs.actors import ActorKind
from runs.models.choices import choices_constraint


class HistoryArchive(models.Model):
    """The anchor of a history archive (``runs.audit.archive``): what the database keeps
    of runs it wrote to a zip and then pruned. Written, with the admin checkpoint that
    records it, after the file is written and read back and before any run is deleted,
    so that every pruned run is in an archive whose anchor exists. ``heads`` names the
    chain head of every run in the file; ``pruned`` counts those deleted since (a run
    that changed meanwhile is kept, and archived again later)."""

    name = models.CharField(max_length=255, help_text="The archive's file name.")
    sha256 = models.CharField(max_length=64, unique=True, help_text="sha256 of the file.")
    created_at = models.DateTimeField(default=timezone.now)
    actor_kind = models.CharField(max_length=8, choices=ActorKind.choices)
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="history_archives",
    )
    actor_label = models.CharField(max_length=200)
    # The cut: every run in the file ended before it (with --policy, before its project's).
    cut = models.JSONField(help_text="What was asked: --before, or each project's days.")
    first_ended_at = models.DateTimeField()
    last_ended_at = models.DateTimeField()
    runs = models.PositiveIntegerField()
    checkpoints = models.PositiveBigIntegerField()
    heads = models.JSONField(help_text="Each run's id and its chain's head hash.")
    pruned = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-created_at"]
        constraints = [choices_constraint("actor_kind", ActorKind, "history_archive_actor_valid")]

    def __str__(self) -> str:
        return f"history archive {self.name} ({self.runs} runs)"
