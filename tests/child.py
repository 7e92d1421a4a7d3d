"""Scenarios run in a child process by the crash tests: ``python -m tests.child NAME ARGS``.

``hang-mid-transition RUN_ID``: starts a run transition, and after the first write (the
run row's update) and before the second (the checkpoint insert) prints ``INSIDE`` and
waits to be killed, holding the transaction open.
"""

import sys
import time

import django

django.setup()

from django.db.models.signals import pre_save  # noqa: E402

from runs.actors import Actor  # noqa: E402
from runs.models import Checkpoint, Run  # noqa: E402
from runs.transitions import transition_run  # noqa: E402


def hang_mid_transition(run_id: str) -> None:
    def hang(**_kwargs) -> None:
        print("INSIDE", flush=True)
        time.sleep(600)

    pre_save.connect(hang, sender=Checkpoint)
    run = Run.objects.get(pk=int(run_id))
    transition_run(run=run, to=Run.Status.COMPLETED, actor=Actor.agent("child"))


SCENARIOS = {"hang-mid-transition": hang_mid_transition}

if __name__ == "__main__":
    SCENARIOS[sys.argv[1]](*sys.argv[2:])
