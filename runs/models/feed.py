from django.db import models

from runs.models.checkpoints import Checkpoint
from runs.models.tokens import AgentToken


class FeedEvent(models.Model):
    """One entry of an agent token's feed: a checkpoint of one of its runs, numbered
    ``seq`` 1, 2, 3… per token in the order the entries are seen committed.

    On PostgreSQL the checkpoint's transaction writes its entry without a number, and
    a reader of the feed numbers what has committed since (``runs.api.feed.number_feed``),
    after the numbers already given, under the token's counter (``AgentToken.feed_seq``)
    for that short moment only. So an entry is numbered only once committed, and a
    reader that has seen ``seq`` n never later finds a new entry below it (the cursor is
    durable: ``after=n`` always means the same thing). Numbering as the checkpoint was
    written held the counter's row until that transaction committed: a writer paused in
    one run's transaction held up every other run of its token. SQLite writes one
    transaction at a time, so there the writer numbers its entry itself (a reader that
    had to write would wait behind every writer)."""

    token = models.ForeignKey(AgentToken, on_delete=models.PROTECT, related_name="feed")
    seq = models.PositiveBigIntegerField(null=True)  # None: committed, not numbered yet.
    checkpoint = models.OneToOneField(
        Checkpoint, on_delete=models.PROTECT, related_name="feed_event"
    )

    class Meta:
        ordering = ["token", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["token", "seq"], name="feed_unique_seq"),
        ]
        indexes = [
            # The entries waiting for a number: number_feed, and the long-polls' watcher.
            models.Index(
                fields=["token", "id"],
                condition=models.Q(seq__isnull=True),
                name="feed_unnumbered_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"feed {self.token_id}#{self.seq}"
