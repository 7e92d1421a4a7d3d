from django.conf import settings
from django.db import models
from django.utils import timezone


class WorkerHeartbeat(models.Model):
    """The last time each worker (by name) was seen working: ``/healthz`` reports
    whether any is alive. One row per name, updated in place."""

    name = models.CharField(max_length=200, unique=True)
    host = models.CharField(max_length=255, blank=True, default="")
    pid = models.PositiveIntegerField(default=0)
    seen_at = models.DateTimeField()
    # The lanes this worker paused because their target stopped answering:
    # {lane: {"since": ISO time, "failures": n, "retry_at": ISO time}}.
    paused_lanes = models.JSONField(default=dict, db_default={}, blank=True)
    # Why this worker runs no file.write (its workspace is not the shared one), or "".
    workspace_refused = models.TextField(blank=True, default="", db_default="")

    def __str__(self) -> str:
        return f"worker {self.name} (seen {self.seen_at:%Y-%m-%d %H:%M:%S})"


class SharedWorkspace(models.Model):
    """The mark of ``file.write``'s workspace (``runs.shared_workspace``): the first
    worker to start records its workspace's mark here, and each worker compares its
    own with it. One row."""

    ROW = 1

    id = models.PositiveSmallIntegerField(primary_key=True, default=ROW)
    mark = models.CharField(max_length=64)
    recorded_by = models.CharField(max_length=200)
    recorded_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=models.Q(id=1), name="one_workspace"),
            models.CheckConstraint(
                condition=models.Q(mark__regex=r"^[0-9a-f]{32}$"), name="workspace_mark_hex"
            ),
        ]

    def __str__(self) -> str:
        return f"workspace {self.mark[:8]}"


class WorkerPause(models.Model):
    """An operator's hold on the workers (``runs.services.pauses``): while a row of a
    lane exists, no worker claims an operation of that lane; while the row of every lane
    (``lane=""``) exists, no worker claims anything. An operation already claimed goes
    on to its end: a pause never stops an effect half-way. Unlike a breaker's pause
    (``WorkerHeartbeat.paused_lanes``), it lasts until someone resumes the workers."""

    EVERY_LANE = ""

    # ``Operation.lane`` as it holds it, or "" for every lane. Workers read the pauses
    # at every claim (``runs.engine.claims``): WHERE lane = '' and WHERE lane = <the
    # candidate's lane>, each by this column's unique index.
    lane = models.CharField(max_length=300, unique=True, blank=True)
    reason = models.TextField()
    # Null for Oversight itself (a restore holding the workers until an admin resumes
    # them); the label names whoever it was either way.
    paused_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="worker_pauses",
    )
    paused_by_label = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["lane"]
        constraints = [
            models.CheckConstraint(
                condition=~models.Q(reason=""), name="worker_pause_reason_given"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.scope} paused by {self.paused_by_label}"

    @property
    def scope(self) -> str:
        """What is paused, in words: ``every lane`` or ``lane <name>``."""
        return "every lane" if self.lane == self.EVERY_LANE else f"lane {self.lane}"
