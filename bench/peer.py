"""LangGraph's SqliteSaver, the checkpointer an agent's developer would otherwise pick,
as a yardstick measured in the bench's own run: ``put_steps`` writes a thread of
~5 KB checkpoints, each with two pending writes, through any saver. Needs the dev lock
(langgraph, langgraph-checkpoint-sqlite)."""

import sqlite3
import time

from django.conf import settings
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.sqlite import SqliteSaver

PAYLOAD = "x" * 5000


def sqlite_saver() -> SqliteSaver:
    """A SqliteSaver on a new file of its own in the bench's folder (WAL mode)."""
    path = settings.VAR_DIR / f"sqlite-saver-{time.time_ns()}.sqlite3"
    saver = SqliteSaver(sqlite3.connect(path, check_same_thread=False))
    saver.setup()
    return saver


def put_steps(saver, thread: str, steps: int) -> tuple[float, dict]:
    """Steps per second, each a ~5 KB checkpoint and two pending writes; the last config."""
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    started = time.perf_counter()
    for step in range(steps):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": PAYLOAD, "step": step}
        checkpoint["channel_versions"] = {"messages": step + 1, "step": step + 1}
        metadata = {"source": "loop", "step": step, "parents": {}}
        config = saver.put(config, checkpoint, metadata, {"messages": step + 1})
        saver.put_writes(config, [("messages", PAYLOAD[:500]), ("step", step)], f"task-{step}")
    return steps / (time.perf_counter() - started), config
