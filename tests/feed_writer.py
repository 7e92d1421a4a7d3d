"""A writer of checkpoints in a child process, for the feed's concurrency tests:
``python -m tests.feed_writer COUNT RUN_ID [RUN_ID…]`` records COUNT rounds of one
checkpoint on each run, in the order given, each in its own transaction (as every
service does), then prints DONE. After its first round it prints WROTE and waits for a
line on its input, so that a test can hold every writer there until all have begun:
they then write their other rounds at the same time. Its checkpoints are the agent
``writer PID``'s."""

import os
import sys

import django

django.setup()

from runs.actors import Actor  # noqa: E402
from runs.models import Run  # noqa: E402
from runs.transitions import record_run_event  # noqa: E402


def main(count: int, run_ids: list[int]) -> None:
    runs = [Run.objects.get(pk=pk) for pk in run_ids]
    actor = Actor.agent(f"writer {os.getpid()}")
    for n in range(count):
        for run in runs:
            record_run_event(run=run, actor=actor, event="run.note", reason=str(n))
        if n == 0:
            print("WROTE", flush=True)
            sys.stdin.readline()
    print("DONE", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), [int(arg) for arg in sys.argv[2:]])
