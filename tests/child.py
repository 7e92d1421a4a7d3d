"""Scenarios run in a child process by the crash tests: ``python -m tests.child NAME ARGS``.

- ``hang-mid-transition RUN_ID``: starts a run transition and, after its first write
  (the run row) and before its second (the checkpoint), prints ``INSIDE`` and waits to
  be killed, holding the transaction open.
- ``worker-crash-at BOUNDARY [SABOTAGE]``: a worker (lease 1 s) that kills itself with
  SIGKILL when it reaches BOUNDARY; SABOTAGE, if named, first alters the target (or
  fails the re-read of a file) right after the effect fired, so that verification fails
  and the rollback runs.
- ``naive-worker ORDER OP_ID``: the orders seed 003 warns against, for comparison:
  ``mark-done-first`` records committed and dies before firing the effect;
  ``fire-then-mark`` fires the effect, then dies before recording anything, and when
  run again (the status still says approved) fires it again.
- ``--step-by-step``, with either of those: the worker carries out an effect inside the
  database step by step, as when the claim's transaction does not go as usual.
- ``worker-poisoned-by CALL_ID``: a worker (lease 1 s) that kills itself with SIGKILL
  whenever the effect of the operation CALL_ID fires: a poison operation.
- ``worker-pause-at BOUNDARY``: a worker (lease 1 s) that stops itself with SIGSTOP
  when it reaches BOUNDARY (printing ``PAUSED``): a GC or VM pause, a slow call. After
  SIGCONT it carries on as a paused process would, then drains and exits.
- ``worker-stop-in-lock SIGNAL SECONDS``: a worker (lease SECONDS) that sends itself
  SIGNAL (``SIGSTOP`` or ``SIGKILL``) right after it first confirms its lease inside a
  target's lock (a file's folder), printing ``IN LOCK``. After SIGCONT it carries on as
  a stopped process would, then drains and exits.
- ``worker-clock-ahead SECONDS``: ``runworker --once`` on a host whose clock runs
  SECONDS ahead of everyone else's.
- ``worker-dies-after-compensating``: a worker killed right after its compensating
  HTTP call was answered, before it recorded the compensation.
- ``worker-dies-after-sending EMAIL_LOG``: a worker that hands an email to the mail
  server (appending its subject to EMAIL_LOG) and is killed before recording that.
- ``api-dies-after-append ADDRESS``: serves the agent API on ADDRESS (runserver's; on
  port 0 it prints the port it got, tests.processes.listening_port) and kills itself
  with SIGKILL as soon as ``append_message`` returns, before the endpoint answers (and
  so before the Idempotency-Key's reply is stored).
"""

import errno
import os
import signal
import sys
from datetime import timedelta

import django

django.setup()

from django.db import connection  # noqa: E402
from django.db.models.signals import pre_save  # noqa: E402

from runs.actions.base import Context  # noqa: E402
from runs.actions.registry import get_action, parse_arguments  # noqa: E402
from runs.actors import Actor  # noqa: E402
from runs.engine.boundaries import EXECUTED, boundary_reached  # noqa: E402
from runs.engine.worker import Worker  # noqa: E402
from runs.models import Checkpoint, Operation, Run  # noqa: E402
from runs.transitions import transition_operation, transition_run  # noqa: E402


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def hang_mid_transition(run_id: str) -> None:
    def hang(**_kwargs) -> None:
        print("INSIDE", flush=True)
        while True:
            signal.pause()  # until SIGKILL

    pre_save.connect(hang, sender=Checkpoint)
    run = Run.objects.get(pk=int(run_id))
    transition_run(run=run, to=Run.Status.COMPLETED, actor=Actor.agent("child"))


def _unreadable_file(operation: Operation) -> None:
    """The file cannot be re-read after the write; where the worker's attempts are spent
    (``OVERSIGHT_MAX_ATTEMPTS=1``), it gives up, and its write, still there, is undone."""
    raise OSError(errno.EIO, os.strerror(errno.EIO), operation.arguments["path"])


def _alter_ledger_entry(operation: Operation) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_ledgerentry SET amount = amount + 1 WHERE idempotency_key = %s",
            [operation.idempotency_key],
        )


SABOTAGE = {"file": _unreadable_file, "ledger": _alter_ledger_entry}


def worker_crash_at(boundary: str, sabotage: str = "") -> None:
    def on_boundary(boundary: str, operation, **_kwargs) -> None:
        if sabotage and boundary == EXECUTED:
            SABOTAGE[sabotage](operation)
        if boundary == crash_at:
            die()

    crash_at = boundary
    boundary_reached.connect(on_boundary)
    Worker(name="doomed", lease=timedelta(seconds=1), at_once=AT_ONCE).drain()


def worker_poisoned_by(call_id: str) -> None:
    def on_boundary(boundary: str, operation, **_kwargs) -> None:
        if boundary == EXECUTED and operation.call_id == call_id:
            die()

    boundary_reached.connect(on_boundary)
    Worker(name="poisoned", lease=timedelta(seconds=1)).drain()


def naive_worker(order: str, op_id: str) -> None:
    operation = Operation.objects.get(pk=int(op_id))
    action = get_action(operation.action)
    args, key = parse_arguments(action, operation.arguments), operation.idempotency_key
    worker = Actor.worker("naive")
    if order == "mark-done-first":
        for status in (Operation.Status.IN_FLIGHT, Operation.Status.COMMITTED):
            transition_operation(operation=operation, to=status, actor=worker)
        die()  # Crash between the record and the effect: the effect never fires.
        action.execute(args, key, Context(operation))
    elif order == "fire-then-mark":
        if operation.status != Operation.Status.APPROVED:
            return
        action.execute(args, key, Context(operation))
        if "--crash" in sys.argv:
            die()  # Crash between the effect and the record.
        for status in (Operation.Status.IN_FLIGHT, Operation.Status.COMMITTED):
            transition_operation(operation=operation, to=status, actor=worker)


def worker_pause_at(boundary: str) -> None:
    def on_boundary(boundary: str, operation, **_kwargs) -> None:
        if boundary == pause_at:
            print("PAUSED", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)

    pause_at = boundary
    boundary_reached.connect(on_boundary)
    Worker(name="paused", lease=timedelta(seconds=1), at_once=AT_ONCE).drain()


def worker_stop_in_lock(signal_name: str, seconds: str) -> None:
    confirm = Context.confirm_lease
    confirmed = []

    def confirm_then_stop(ctx: Context) -> None:
        confirm(ctx)
        if not confirmed:
            confirmed.append(ctx)
            print("IN LOCK", flush=True)
            os.kill(os.getpid(), getattr(signal, signal_name))

    Context.confirm_lease = confirm_then_stop
    lease = timedelta(seconds=float(seconds))
    Worker(name="stopped", lease=lease, at_once=AT_ONCE).drain()


def worker_clock_ahead(seconds: str) -> None:
    from django.utils import timezone

    real_now = timezone.now
    timezone.now = lambda: real_now() + timedelta(seconds=float(seconds))
    Worker(name="ahead", lease=timedelta(seconds=60)).drain()


def worker_dies_after_compensating() -> None:
    from runs.actions import http

    send = http.send

    def send_then_die(call, key, headers):
        answer = send(call, key, headers)
        if key.endswith(":compensate"):
            die()
        return answer

    http.send = send_then_die
    Worker(name="doomed", lease=timedelta(seconds=1), at_once=AT_ONCE).drain()


def worker_dies_after_sending(email_log: str) -> None:
    from runs.actions import email

    def send_then_die(message, *args, **kwargs) -> int:
        with open(email_log, "a") as log:
            log.write(message.subject + "\n")
        die()  # The server has the message; the sent record still says "sending".

    email.EmailMessage.send = send_then_die
    Worker(name="doomed", lease=timedelta(seconds=1), at_once=AT_ONCE).drain()


def api_dies_after_append(address: str) -> None:
    from django.core.management import call_command

    from runs.api import endpoints

    append = endpoints.append_message

    def append_then_die(**kwargs):
        append(**kwargs)
        die()

    endpoints.append_message = append_then_die
    call_command("runserver", "--noreload", address)


SCENARIOS = {
    "hang-mid-transition": hang_mid_transition,
    "worker-crash-at": worker_crash_at,
    "worker-poisoned-by": worker_poisoned_by,
    "naive-worker": naive_worker,
    "worker-pause-at": worker_pause_at,
    "worker-stop-in-lock": worker_stop_in_lock,
    "worker-clock-ahead": worker_clock_ahead,
    "worker-dies-after-compensating": worker_dies_after_compensating,
    "worker-dies-after-sending": worker_dies_after_sending,
    "api-dies-after-append": api_dies_after_append,
}

AT_ONCE = "--step-by-step" not in sys.argv

if __name__ == "__main__":
    name, *args = sys.argv[1:]
    SCENARIOS[name](*[arg for arg in args if arg not in ("--crash", "--step-by-step")])
