"""A LangGraph graph writer in a child process, for the checkpointer's concurrency test:
``python -m tests.graph_writer PROJECT THREAD NAME COUNT`` puts COUNT checkpoints, each
with two pending writes, on THREAD through OversightSaver, then prints DONE."""

import sys

import django

django.setup()

from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402

from graphs.saver import OversightSaver  # noqa: E402


def main(project: str, thread: str, name: str, count: int) -> None:
    saver = OversightSaver(project=project)
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    for step in range(count):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"writer": name, "step": step}
        config = saver.put(config, checkpoint, {"source": "loop", "step": step, "writer": name}, {})
        saver.put_writes(config, [("writer", name), ("step", step)], f"{name}-{step}")
    print("DONE", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
