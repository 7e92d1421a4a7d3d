"""``manage.py runworker ARGS`` as a child process that says what it is doing:
``python -m tests.telling_worker ARGS`` prints STEP as each step (housekeeping, then a
look for work) begins, and WAITING as it begins to wait for work after a step that
found none. A test that must reach a worker at one of those points waits for its line
(``told``), instead of sleeping and hoping the worker got there."""

import subprocess
import sys

import django


def told(worker: subprocess.Popen, said: str) -> None:
    """Return once ``worker`` says ``said`` (STEP or WAITING)."""
    while (line := worker.stdout.readline()) != f"{said}\n":
        if not line:
            raise AssertionError(f"the worker exited before {said}: {worker.stderr.read()}")


def main(args: list[str]) -> None:
    django.setup()
    from django.core.management import call_command

    from runs.engine.wakeup import Wakeup
    from runs.engine.worker import Worker

    step, wait = Worker.step, Wakeup.wait

    def telling_step(self) -> bool:
        print("STEP", flush=True)
        return step(self)

    def telling_wait(self, seconds, stopped=lambda: False) -> bool:
        print("WAITING", flush=True)
        return wait(self, seconds, stopped)

    Worker.step, Wakeup.wait = telling_step, telling_wait
    call_command("runworker", *args)


if __name__ == "__main__":
    main(sys.argv[1:])
