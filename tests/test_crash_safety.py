"""Seed 000: a crash between the two writes of a transition leaves neither write —
shown with an exception and a new connection, and with a process killed by SIGKILL."""

import signal

import pytest
from django.db import connection
from django.db.models.signals import pre_save

from runs.actors import Actor
from runs.models import Checkpoint, Run
from runs.transitions import transition_run
from tests.processes import spawn, wait_for_line

pytestmark = pytest.mark.django_db(transaction=True)


def snapshot(run_id: int) -> tuple:
    run = Run.objects.get(pk=run_id)
    return run.status, run.version, run.checkpoints.count()


def fail_between_writes(**_kwargs) -> None:
    raise RuntimeError("crash between the two writes")


def test_exception_between_the_two_writes_leaves_neither(run):
    before = snapshot(run.pk)
    pre_save.connect(fail_between_writes, sender=Checkpoint)
    try:
        with pytest.raises(RuntimeError):
            transition_run(run=run, to=Run.Status.COMPLETED, actor=Actor.agent("test"))
    finally:
        pre_save.disconnect(fail_between_writes, sender=Checkpoint)
    connection.close()  # Recover as the next process would: on a new connection.

    assert snapshot(run.pk) == before
    fresh = Run.objects.get(pk=run.pk)
    transition_run(run=fresh, to=Run.Status.COMPLETED, actor=Actor.agent("test"))
    assert snapshot(run.pk) == ("completed", before[1] + 1, before[2] + 1)


def test_process_killed_mid_transaction_leaves_no_half_state(run):
    before = snapshot(run.pk)
    child = spawn("hang-mid-transition", str(run.pk))
    wait_for_line(child, "INSIDE")
    child.send_signal(signal.SIGKILL)
    assert child.wait(timeout=10) == -signal.SIGKILL

    assert snapshot(run.pk) == before
    # The killed writer's lock is gone: the next writer proceeds at once.
    transition_run(run=Run.objects.get(pk=run.pk), to="completed", actor=Actor.agent("next"))
    assert snapshot(run.pk) == ("completed", before[1] + 1, before[2] + 1)
