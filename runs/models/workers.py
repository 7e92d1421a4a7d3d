from django.db import models


class WorkerHeartbeat(models.Model):
    """The last time each worker (by name) was seen working: ``/healthz`` reports
    whether any is alive. One row per name, updated in place."""

    name = models.CharField(max_length=200, unique=True)
    host = models.CharField(max_length=255, blank=True, default="")
    pid = models.PositiveIntegerField(default=0)
    seen_at = models.DateTimeField()
    # The lanes this worker paused because their target stopped answering:
    # {lane: {"since": ISO time, "failures": n, "retry_at": ISO time}}.
    paused_lanes = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return f"worker {self.name} (seen {self.seen_at:%Y-%m-%d %H:%M:%S})"
