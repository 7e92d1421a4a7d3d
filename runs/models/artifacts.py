from django.db import models
from django.utils import timezone


class Artifact(models.Model):
    """A content-addressed blob. The bytes are written (and fsynced) to durable storage
    before this row exists, and this row before any checkpoint references it (seed 000),
    so a crash can leave an orphan blob but never a reference to missing content."""

    sha256 = models.CharField(max_length=64, unique=True)
    size = models.PositiveBigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    # Last time these bytes were stored; orphans get a grace period counted from here.
    stored_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(sha256__regex=r"^[0-9a-f]{64}$"), name="artifact_sha256_hex"
            )
        ]

    def __str__(self) -> str:
        return f"{self.sha256[:12]} ({self.size} bytes)"
