"""The worker: a loop around ``step()``, which claims (one operation, or several
effects inside the database together) and says whether it did any work. Run as a
process (``run()``), it carries out up to ``OVERSIGHT_WORKER_EFFECTS`` effects at once,
in lanes (``runs.engine.effects``), and delivers alerts and reviewers' emails in a
thread of their own (``notifying``); a ``step()`` called alone (tests, ``--once``)
carries its effects out before it returns.
SIGTERM (or SIGINT) stops the claims and lets the effects in hand end."""

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from copy import copy
from datetime import timedelta
from functools import partial

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection
from django.db.models.functions import Now

from oversight.sqlite3.writes import giving_way
from runs import shared_workspace
from runs.actions.files import clear_leftovers
from runs.api.replay import purge_expired
from runs.clock import db_now
from runs.engine.boundaries import CLAIMED, reach
from runs.engine.claims import TOGETHER, claim
from runs.engine.effects import Effects
from runs.engine.executor import Execution
from runs.engine.lanes import Lanes
from runs.engine.lease import LeaseLost
from runs.engine.notifying import NotificationLane
from runs.engine.stalls import StallWatch
from runs.engine.sweeper import sweep_agent_operations
from runs.engine.turns import Turns
from runs.engine.wakeup import Wakeup
from runs.errors import StaleVersion
from runs.logs import Repeats, about
from runs.models import Operation, Run, WorkerHeartbeat
from runs.services.decisions import expire_due_operations
from runs.services.memberships import expire_sign_in_roles
from runs.services.requests import expire_due_requests
from runs.services.tokens import withdraw_orphaned_operations
from runs.shared_workspace import NotShared

log = logging.getLogger(__name__)
HOUSEKEEPING_EVERY_SECONDS = 60
DUE_EVERY_SECONDS = 1.0


class Worker:
    def __init__(
        self, name: str = "", lease: timedelta | None = None, at_once: bool = True
    ) -> None:
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.lease = lease or timedelta(seconds=settings.OVERSIGHT_LEASE_SECONDS)
        # Carry out an effect inside the database in its claim's transaction (the crash
        # tests turn this off to cover the step-by-step way there too).
        self.at_once = at_once
        self.stopping = False
        self.next_housekeeping = 0.0
        self.next_due = 0.0
        # Whether the last claim's transaction carried each operation out (by key);
        # absent if it did not try.
        self.done_in_claim: dict[int, bool] = {}
        self.wakeup = Wakeup()
        self.turns = Turns()
        # Stepping in a loop (``drain()``, ``run()``): a step that found work keeps the
        # turn for the next (``Turns``). A step called alone lets it go.
        self.looping = False
        # Set by ``run()``: effects carried out at once. Notifications have a thread of
        # their own there; otherwise housekeeping makes their rounds.
        self.effects: Effects | None = None
        self.notifications = NotificationLane(self.name)
        self.publishing = threading.Lock()
        self.failures = Repeats(log)  # this thread's: steps, housekeeping, waits
        # Why this worker's workspace is not the shared one ("" if it is), as of its
        # last heartbeat: it then claims no operation of those actions.
        self.workspace_refused = ""

    def step(self) -> bool:
        """Do the housekeeping, then claim and carry out what was claimed (or start it,
        in ``run()``); say whether there was work. What is due is looked for before a
        claim at most once a second (six queries, and nothing there that urgent: a
        worker woken by an approval claims it at once, since it looked less than a
        second ago while idle), and as soon as the queue is empty."""
        skipped = time.monotonic() < self.next_due
        did_work = False if skipped else self.housekeeping()
        if self.effects is not None:
            self.effects.freed.clear()
            if self.effects.full:
                self.turns.pass_on()
                return did_work
        self.done_in_claim = {}
        closed = self.effects.closed() if self.effects else set()
        with self.turns.turn(stopped=lambda: self.stopping) as turn, giving_way():
            then = self._at_once if self.at_once else None
            claimed = claim(
                worker=self.name,
                lease=self.lease,
                then=then,
                skip=closed,
                most=self._most(),
                refuse=shared_workspace.ACTIONS if self.workspace_refused else frozenset(),
            )
            turn.keep = self.looping and bool(claimed) and not self.stopping
        if not claimed:  # The queue is empty: catch up on what is due.
            return self.housekeeping() if skipped else did_work
        for operation in claimed:
            done = self.done_in_claim.get(operation.pk)
            if done:
                continue
            if done is None:
                reach(CLAIMED, operation)
            if self.effects is None:  # Carried out here: the turn is not held meanwhile.
                self.turns.pass_on()
                self.carry_out(operation)
            else:
                self.effects.start(operation.lane, partial(self.carry_out, operation))
        return True

    def _most(self) -> int:
        """How many operations one claim may take: several effects inside the database
        in one transaction where writers take turns anyway (SQLite: one commit for
        them all, the database held for at most ``TOGETHER_SECONDS`` and one more),
        as many as free slots can take if one goes step by step. One elsewhere: on PostgreSQL
        workers write side by side, and a transaction holding several transfers'
        accounts would make them wait on each other."""
        if connection.vendor != "sqlite":
            return 1
        return min(TOGETHER, self.effects.free if self.effects else TOGETHER)

    def carry_out(self, operation: Operation) -> None:
        """Drive a claimed operation as far as this worker can; never raises."""
        with _about(operation):
            try:
                Execution(operation, self.name, self.lease).run()
            except (LeaseLost, StaleVersion) as lost:
                # Our lease lapsed or was taken over: the new holder owns the operation now.
                log.warning("%s lost operation %s: %s", self.name, operation.pk, lost)
            except NotShared as refused:  # Claim no more such until the workspace is back.
                self.workspace_refused = str(refused)
            except Exception:
                # Not even the failure could be recorded (the database went away?): the
                # lease lapses and a later attempt resumes; the worker goes on.
                log.exception("%s: operation %s", self.name, operation.pk)

    def _at_once(self, operation: Operation, run: Run) -> None:
        """In the claim's transaction: an effect inside Oversight's database is carried
        out there and then if all goes as usual (``Execution.run_at_once``), on copies
        of the operation and the run, which a step rolled back would leave untrue."""
        execution = Execution(copy(operation), self.name, self.lease)
        if execution.at_once_applies:
            reach(CLAIMED, operation)
            with _about(operation):
                self.done_in_claim[operation.pk] = execution.run_at_once(copy(run))

    def housekeeping(self) -> bool:
        """Expire what is overdue (proposals, approvals, human requests), settle abandoned
        agent operations, and once a minute clear killed writers' temporary files, delete
        expired API replies, take back roles no sign-in confirmed in time and withdraw
        agent operations whose token will never act again; unless the
        notifications have their own lane, deliver due alerts and, once a minute, notify
        reviewers. A failure here (a database busy past its timeout) is logged, and the
        step goes on."""
        self.next_due = time.monotonic() + DUE_EVERY_SECONDS
        minutely = time.monotonic() >= self.next_housekeeping
        try:
            if minutely:
                self.beat()  # First: a slow delivery below must not make it look dead.
            now = db_now()  # What is due; a claim reads the clock again for its lease.
            did_work = expire_due_operations(now) > 0
            did_work |= expire_due_requests(now) > 0
            did_work |= sweep_agent_operations(now) > 0
            if not self.notifications.running:
                did_work |= self.notifications.round(now)
            if minutely:
                self.next_housekeeping = time.monotonic() + HOUSEKEEPING_EVERY_SECONDS
                clear_leftovers()
                purge_expired(now)
                expire_sign_in_roles(now)
                withdraw_orphaned_operations()  # Last: each waits for its run's lock.
        except Exception as error:
            self.failures.failed(f"worker {self.name}: housekeeping", error)
            return False
        self.failures.worked(f"worker {self.name}: housekeeping")
        return did_work

    def beat(self) -> None:
        """Say this worker is alive (``/healthz`` reads it), in the database's clock at
        the moment of writing, and whether its workspace is the shared one (said in
        the log when that changes)."""
        refused = shared_workspace.refusal(self.name)  # Never raises: a beat is written.
        if refused != self.workspace_refused:
            if refused:
                log.warning("worker %s: %s", self.name, refused)
            else:
                log.info("worker %s: file.write runs here (the shared workspace)", self.name)
            self.workspace_refused = refused
        WorkerHeartbeat.objects.update_or_create(
            name=self.name,
            defaults={
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "seen_at": Now(),
                "workspace_refused": refused,
            },
        )

    def publish_lanes(self) -> None:
        """Say which lanes this worker paused (a breaker opened or closed), for the pages,
        ``/healthz`` and ``/metrics``. In the thread of the effect that changed it; one at
        a time, so that an older view never overwrites a newer one."""
        with self.publishing:
            try:
                paused = self.effects.lanes.paused()
                WorkerHeartbeat.objects.filter(name=self.name).update(paused_lanes=paused)
            except DatabaseError as error:  # The next change (or beat) says it again.
                log.warning("worker %s: paused lanes not recorded: %s", self.name, error)

    def drain(self) -> None:
        """Work until nothing is ready (``runworker --once``)."""
        with self._looping():
            while not self.stopping and self.step():
                pass

    def sign_off(self) -> None:
        """A worker that stopped cleanly, its effects finished, is alive no more: its
        heartbeat goes, so that ``/healthz`` and ``restore`` (which refuses while a worker
        is alive) do not count it for the minutes a heartbeat stays fresh. A worker
        killed keeps its row, which ages out."""
        try:
            WorkerHeartbeat.objects.filter(name=self.name).delete()
        except DatabaseError as error:
            log.warning("worker %s: heartbeat not removed at the end: %s", self.name, error)

    @contextmanager
    def _looping(self) -> Iterator[None]:
        self.looping = True
        try:
            yield
        finally:
            self.looping = False
            self.turns.pass_on()

    def run(self, idle_seconds: float = 0.5) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._stop)
        bound = settings.OVERSIGHT_DB_IDLE_IN_TRANSACTION_SECONDS
        if bound and StallWatch.applies():
            StallWatch(bound).watching(stopped=lambda: self.stopping)
        lanes = Lanes(on_change=self.publish_lanes)
        self.effects = Effects(settings.OVERSIGHT_WORKER_EFFECTS, lanes)
        self.notifications.start()
        log.info("worker %s started", self.name)
        with self._looping():
            while not self.stopping:
                _drop_stale_connection()
                try:
                    self.wakeup.watch()
                    did_work = self.step()
                except Exception as error:
                    # The operation keeps its lease and is taken over when it expires.
                    self.failures.failed(f"worker {self.name}: step", error)
                    did_work = False
                else:
                    self.failures.worked(f"worker {self.name}: step")
                if not did_work:
                    self._idle(idle_seconds)
        self.effects.finish()
        self.notifications.stop()
        self.sign_off()
        log.info("worker %s stopped", self.name)

    def _idle(self, seconds: float) -> None:
        """Wait for work (or for a slot, when an effect ends), or ``seconds``; a failed
        wait (the database went away) still waits out its time before the next step
        tries again."""
        started = time.monotonic()
        freed = self.effects.freed if self.effects else None
        try:
            self.wakeup.wait(
                seconds, stopped=lambda: self.stopping or bool(freed and freed.is_set())
            )
        except Exception as error:
            self.failures.failed(f"worker {self.name}: waiting for work", error)
            time.sleep(max(0.0, seconds - (time.monotonic() - started)))
        else:
            self.failures.worked(f"worker {self.name}: waiting for work")

    def _stop(self, signum, _frame) -> None:
        self.stopping = True


def _drop_stale_connection() -> None:
    """Before a step: close this thread's connection if it broke or outlived its
    ``CONN_MAX_AGE`` (PostgreSQL's). SQLite's is kept: its maximum age is none, so that
    each web request opens the database anew, and a worker that did so at every step
    opened the file, ran its PRAGMAs and registered Django's SQL functions again for
    each operation (a long-running worker drained transfers at 62 % of ``--once``'s
    pace)."""
    if connection.vendor != "sqlite":
        close_old_connections()


def _about(operation: Operation):
    """Log lines name the operation (and hide its arguments' secrets)."""
    arguments = [operation.arguments, operation.proposed_arguments]
    return about(run_id=operation.run_id, operation_id=operation.pk, arguments=arguments)
