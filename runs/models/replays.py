from django.db import models
from django.utils import timezone


class ApiReplay(models.Model):
    """The first answer to a mutating API request sent with an ``Idempotency-Key``,
    replayed for any retry of it (the same credential, key, method, path and body).
    Written in the request's own transaction, so a row exists only with the writes
    that produced its answer (``runs.api.replay``)."""

    scope = models.CharField(max_length=64, help_text="sha256 of the credential.")
    key = models.CharField(max_length=200)
    request_hash = models.CharField(max_length=64)
    status = models.PositiveSmallIntegerField(help_text="0 while the first attempt runs.")
    content_type = models.CharField(max_length=100)
    body = models.BinaryField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["scope", "key"], name="replay_unique_key")]
        # Housekeeping deletes expired answers once a minute: no scan of the table.
        indexes = [models.Index(fields=["created_at"], name="replay_created_idx")]

    def __str__(self) -> str:
        return f"replay {self.key} ({self.status})"
