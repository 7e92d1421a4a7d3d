from django.db import models

from runs.models.checkpoints import Checkpoint
from runs.models.tokens import AgentToken


class FeedEvent(models.Model):
    """One entry of an agent token's feed: a checkpoint of one of its runs, numbered
    ``seq`` 1, 2, 3… per token. The number is taken from the token's counter
    (``AgentToken.feed_seq``) in the checkpoint's own transaction, which holds the
    token's row until it commits; so entries commit in ``seq`` order, and a reader
    that has seen ``seq`` n never later finds a new entry below it (the cursor is
    durable: ``after=n`` always means the same thing)."""

    token = models.ForeignKey(AgentToken, on_delete=models.PROTECT, related_name="feed")
    seq = models.PositiveBigIntegerField()
    checkpoint = models.OneToOneField(
        Checkpoint, on_delete=models.PROTECT, related_name="feed_event"
    )

    class Meta:
        ordering = ["token", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["token", "seq"], name="feed_unique_seq"),
        ]

    def __str__(self) -> str:
        return f"feed {self.token_id}#{self.seq}"
