"""A LangGraph thread's checkpoints and pending writes, per Oversight project.

The rows are the agent's own record of its graph, outside Oversight's hash chain: the
agent may delete or prune them (LangGraph's contract), which the run's chain records
(see ``graphs.saver``). A thread whose id is a run's ``external_id`` in the same project
is shown on that run's audit page; there is no foreign key, since a thread may
checkpoint before the agent creates its run.
"""

from django.db import models


class GraphCheckpoint(models.Model):
    # No index of its own: the unique key below starts with it (one index less to write).
    project = models.ForeignKey(
        "runs.Project", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    thread_id = models.CharField(max_length=200)
    checkpoint_ns = models.CharField(max_length=200, blank=True, default="")
    checkpoint_id = models.CharField(max_length=64)
    parent_checkpoint_id = models.CharField(max_length=64, blank=True, default="")
    # LangGraph's run id (metadata["run_id"]), for delete_for_runs; not an Oversight run.
    run_id = models.CharField(max_length=64, blank=True, default="")
    # The serializer's type tag and bytes (serde.dumps_typed), decoded only for display.
    type = models.CharField(max_length=32)
    checkpoint = models.BinaryField()
    metadata = models.JSONField(default=dict)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "thread_id", "checkpoint_ns", "checkpoint_id"],
                name="graph_checkpoint_key",
            )
        ]
        indexes = [models.Index(fields=["project", "run_id"], name="graph_checkpoint_run")]

    def __str__(self) -> str:
        return f"{self.thread_id} {self.checkpoint_ns} {self.checkpoint_id}"


class GraphWrite(models.Model):
    """A pending write: a task's output on a channel, kept until the next checkpoint."""

    # No index of its own: the unique key below starts with it (one index less to write).
    project = models.ForeignKey(
        "runs.Project", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    thread_id = models.CharField(max_length=200)
    checkpoint_ns = models.CharField(max_length=200, blank=True, default="")
    checkpoint_id = models.CharField(max_length=64)
    task_id = models.CharField(max_length=64)
    task_path = models.CharField(max_length=500, blank=True, default="")
    idx = models.IntegerField()
    channel = models.CharField(max_length=200)
    type = models.CharField(max_length=32)
    value = models.BinaryField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"],
                name="graph_write_key",
            )
        ]

    def __str__(self) -> str:
        return f"{self.checkpoint_id} {self.task_id} {self.idx} {self.channel}"
