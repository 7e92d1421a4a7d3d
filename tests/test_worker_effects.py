"""One worker process carries out many effects at once (#33), each with its own claim,
lease and fencing epoch, grouped in lanes by target: a lane has a limit and a circuit
breaker, so a target that hangs or fails holds its own lane and nothing else; alert
deliveries go out in a thread of their own, so a mail server that never answers delays
no claim. Real ``runworker`` processes against real local targets; when things happened
is read from the checkpoints the workers wrote."""

import re
import signal
import socket
import subprocess
import threading
from contextlib import suppress
from datetime import datetime, timedelta
from http.server import ThreadingHTTPServer

import pytest

from runs.clock import db_now
from runs.demo.target import Handler, TargetState
from runs.engine.claims import TAKEN_OVER
from runs.models import (
    Alert,
    AlertDelivery,
    ApprovalPolicy,
    Checkpoint,
    Operation,
    WorkerHeartbeat,
)
from runs.services.runs import start_run
from tests.conftest import AGENT
from tests.processes import Output, manage_started, take_over, wait_until
from tests.test_worker_processes import PATIENT

pytest_plugins = ["tests.ports"]
pytestmark = pytest.mark.django_db(transaction=True)

WORKER = "effects-1"
CLAIMS = ("operation.status", TAKEN_OVER)  # A first claim, or a takeover.


@pytest.fixture
def puts(project, session, propose):
    """``puts(base, count, tag)``: ``count`` PUTs of new items at ``base``, approved by
    the project's policy as they are proposed, each in a run of its own, in this order."""
    ApprovalPolicy.objects.create(project=project, action="http.request", approvals_required=0)

    def make(base: str, count: int, tag: str) -> list[Operation]:
        operations = []
        for n in range(count):
            run = start_run(session=session, goal=f"{tag} {n}", actor=AGENT)
            url, body = f"{base}/items/{tag}-{n}", {"n": n}
            arguments = {"method": "PUT", "url": url, "body": body}
            operations.append(
                propose(
                    f"{tag}-{n}",
                    target=run,
                    action="http.request",
                    arguments={**arguments, "verify": {"url": url, "json": body}},
                    rollback_kind="out_of_band",
                    risk="low",
                )
            )
        return operations

    return make


@pytest.fixture
def start_worker():
    """``start_worker(*args, **env)``: ``runworker --name effects-1 ARGS`` (``env`` added
    to its environment); killed at the end, mid-effect or not. Its log, read as it comes,
    is shown with a failed test's output."""
    started = []

    def start(*args: str, **env: str) -> subprocess.Popen:
        worker = manage_started(
            "runworker", "--name", WORKER, *args, stdout=subprocess.DEVNULL, **env
        )
        worker.log = Output(worker.stderr)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()
        worker.wait()
        print(f"runworker's log:\n{worker.log.text()}")


def allow(settings, host: str) -> str:
    """Put ``host`` on the HTTP allow-list (child workers inherit it); its base URL."""
    settings.OVERSIGHT_HTTP_ALLOWED_HOSTS = [*settings.OVERSIGHT_HTTP_ALLOWED_HOSTS, host]
    return f"http://{host}"


def all_committed(operations: list[Operation]) -> bool:
    ids = [op.pk for op in operations]
    return not Operation.objects.filter(pk__in=ids).exclude(status="committed").exists()


def written(operations: list[Operation], **where) -> list[datetime]:
    """When the checkpoints of ``operations`` matching ``where`` were written, in order."""
    checkpoints = Checkpoint.objects.filter(operation__in=operations, **where)
    return sorted(checkpoints.values_list("created_at", flat=True))


def applied_once(target, operations: list[Operation]) -> bool:
    return [target.applied[op.idempotency_key] for op in operations] == [1] * len(operations)


# --- Many effects in flight in one worker, each under its own lease ---------------------


class HeldCalls:
    """The target holds each of the first ``count`` PUTs it receives until ``release()``,
    noting each (its idempotency key and fencing epoch) as it arrives; later PUTs go
    through. ``ended`` counts the held ones that went on to the target once let go."""

    def __init__(self, target, count: int) -> None:
        self.count = count
        self.calls: list[tuple[str, str]] = []
        self.ended = 0
        self.released = threading.Event()
        self.lock = threading.Lock()
        put = target.RequestHandlerClass.do_PUT

        def held_put(handler) -> None:
            if not self._held(handler):
                return put(handler)
            self.released.wait(timeout=60)
            try:
                with suppress(OSError):  # The worker that sent it is gone.
                    put(handler)
            finally:
                with self.lock:
                    self.ended += 1

        target.RequestHandlerClass.do_PUT = held_put

    def _held(self, handler) -> bool:
        """Whether to hold this PUT (noted if so)."""
        call = (handler.headers["Idempotency-Key"], handler.headers["Oversight-Fencing-Epoch"])
        with self.lock:
            if len(self.calls) == self.count:
                return False
            self.calls.append(call)
            return True

    def release(self) -> None:
        self.released.set()


@pytest.fixture
def held_calls(target):
    """``held_calls(count)``: a ``HeldCalls`` on the demo target, let go at the end."""
    made: list[HeldCalls] = []

    def hold(count: int) -> HeldCalls:
        made.append(HeldCalls(target, count))
        return made[-1]

    yield hold
    for calls in made:
        calls.release()


def test_one_worker_has_eight_effects_in_flight_and_a_takeover_resumes_each_once(
    puts, target, deduplicating, held_calls, start_worker
):
    """Eight calls held by the target at once, all sent by one worker, each under a lease
    and epoch of its own. The worker is killed with all eight in flight; another takes
    each over once and calls again (the target deduplicates); the dead worker's calls,
    reaching the target late, carry a stale epoch and are refused: each effect once."""
    operations = puts(target.base, 8, "item")
    calls = held_calls(8)
    worker = start_worker("--lease-seconds", "3", **PATIENT)

    wait_until(lambda: len(calls.calls) == 8, 30, "eight calls held at once", worker)
    leases = Operation.objects.filter(
        pk__in=[op.pk for op in operations], status="in_flight", lease_expires_at__gt=db_now()
    ).values_list("pk", "lease_owner", "fencing_epoch")
    assert set(leases) == {(op.pk, WORKER, 1) for op in operations}
    assert sorted(calls.calls) == sorted((op.idempotency_key, "1") for op in operations)

    worker.kill()
    assert worker.wait(timeout=10) == -signal.SIGKILL
    take_over()
    calls.release()
    wait_until(lambda: calls.ended == 8, 30, "the dead worker's calls reaching the target")

    assert all_committed(operations)
    takeovers = Checkpoint.objects.filter(operation__in=operations, event=TAKEN_OVER)
    assert sorted(takeovers.values_list("operation_id", flat=True)) == [op.pk for op in operations]
    assert len(written(operations, event="operation.status", to_status="in_flight")) == 8
    assert applied_once(target, operations)


def test_a_worker_stopped_with_eight_effects_in_flight_holds_them_up_to_its_leases_only(
    puts, target, deduplicating, held_calls, start_worker
):
    """The same eight calls in flight, and the worker stopped (SIGSTOP) instead: each
    operation waits for its lease only, then another worker takes it over and commits it.
    Continued, the stopped worker's calls reach the target with a stale epoch and are
    refused, and it records nothing more about the eight: each effect once."""
    operations = puts(target.base, 8, "item")
    calls = held_calls(8)
    worker = start_worker("--lease-seconds", "3", **PATIENT)
    wait_until(lambda: len(calls.calls) == 8, 30, "eight calls held at once", worker)

    worker.send_signal(signal.SIGSTOP)
    try:
        take_over()
        assert all_committed(operations)
        taken_over = db_now()
        worker.send_signal(signal.SIGCONT)
        calls.release()
        wait_until(lambda: calls.ended == 8, 30, "the stopped worker's calls reaching the target")
        lost = [re.escape(f"{WORKER} lost operation {op.pk}:") for op in operations]
        wait_until(lambda: all(map(worker.log.find, lost)), 30, "each of the eight lost", worker)
    finally:
        worker.send_signal(signal.SIGCONT)

    assert all_committed(operations)
    assert applied_once(target, operations)
    late = Checkpoint.objects.filter(
        operation__in=operations, actor_label=WORKER, created_at__gt=taken_over
    )
    assert not late.exists()
    takeovers = Checkpoint.objects.filter(operation__in=operations, event=TAKEN_OVER)
    assert sorted(takeovers.values_list("operation_id", flat=True)) == [op.pk for op in operations]


def test_sigterm_stops_the_claims_and_lets_every_effect_in_hand_finish(
    puts, target, held_calls, start_worker
):
    """SIGTERM with four calls held by the target: the worker claims nothing more, and
    exits (0) only once each of the four it holds has committed; what it never claimed
    stays approved for the next worker."""
    operations = puts(target.base, 4, "held")
    calls = held_calls(4)
    worker = start_worker(OVERSIGHT_LANE_EFFECTS="4", **PATIENT)
    wait_until(lambda: len(calls.calls) == 4, 30, "four calls held at once", worker)
    later = puts(target.base, 2, "later")  # Its lane is full: not claimed yet.

    worker.send_signal(signal.SIGTERM)
    with pytest.raises(subprocess.TimeoutExpired):
        worker.wait(timeout=1)  # Its effects are still held: it waits for them.
    calls.release()

    assert worker.wait(timeout=30) == 0
    assert all_committed(operations)
    assert applied_once(target, operations)
    statuses = Operation.objects.filter(pk__in=[op.pk for op in later]).values_list(
        "status", flat=True
    )
    assert list(statuses) == ["approved", "approved"]


# --- A target that never answers holds its own lane only --------------------------------


class Hanging:
    """A target that accepts every connection and never answers, nor hangs up."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.host = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._hold, daemon=True).start()

    def _hold(self) -> None:
        with suppress(OSError):  # Closed at the end of the test.
            while True:
                self.accepted.append(self.listener.accept()[0])

    def close(self) -> None:
        with suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # Wakes the accept() above.
        self.listener.close()
        for connection in self.accepted:
            connection.close()


@pytest.fixture
def hanging():
    target = Hanging()
    yield target
    target.close()


DEADLINE = 5  # seconds: OVERSIGHT_HTTP_DEADLINE_SECONDS
LANE_LIMIT = 4
LANES = {
    "OVERSIGHT_HTTP_DEADLINE_SECONDS": str(DEADLINE),
    "OVERSIGHT_WORKER_EFFECTS": "8",
    "OVERSIGHT_LANE_EFFECTS": str(LANE_LIMIT),
}


def test_a_target_that_never_answers_does_not_hold_up_another_targets_operations(
    puts, target, hanging, settings, start_worker
):
    """Ten operations against a target that hangs, proposed first, are more than the
    worker's eight slots: their lane takes four, and six operations against a healthy
    target, proposed after them, all commit while the four still wait on their target,
    well before its deadline."""
    stuck = puts(allow(settings, hanging.host), 10, "stuck")
    healthy = puts(target.base, 6, "healthy")
    worker = start_worker(**LANES)

    wait_until(lambda: all_committed(healthy), 30, "the healthy operations committed", worker)
    committed = written(healthy, to_status="committed")
    claimed = written(stuck, event="operation.status", to_status="in_flight")
    assert committed[-1] - claimed[0] < timedelta(seconds=DEADLINE / 2)
    # Meanwhile the lane that hangs took its limit of slots, and heard nothing back.
    meanwhile = Checkpoint.objects.filter(
        operation__in=stuck, created_at__gte=claimed[0], created_at__lte=committed[-1]
    )
    claim = ("operation.status", "in_flight")
    assert list(meanwhile.values_list("event", "to_status")) == [claim] * LANE_LIMIT
    assert applied_once(target, healthy)


# --- A circuit breaker opens on a failing target, and closes when it answers ------------


FAILURES = 3  # OVERSIGHT_LANE_FAILURES
BACKOFF = 3  # seconds
BREAKER = {
    "OVERSIGHT_LANE_FAILURES": str(FAILURES),
    "OVERSIGHT_LANE_BACKOFF_SECONDS": str(BACKOFF),
    "OVERSIGHT_LANE_LONGEST_BACKOFF_SECONDS": str(BACKOFF),
    # The first operations' failed attempts are retried, not given up.
    "OVERSIGHT_MAX_ATTEMPTS": "10",
}


def paused_lanes() -> dict:
    heartbeat = WorkerHeartbeat.objects.filter(name=WORKER).first()
    return heartbeat.paused_lanes if heartbeat else {}


@pytest.fixture
def recovering(refusing_socket):
    """A demo target whose port refuses connections until ``listen()``; ``host``."""
    server = ThreadingHTTPServer(
        refusing_socket.getsockname(),
        type("Recovering", (Handler,), {"state": TargetState()}),
        bind_and_activate=False,
    )
    server.socket.close()
    server.socket = refusing_socket
    server.host = f"127.0.0.1:{refusing_socket.getsockname()[1]}"
    server.applied = server.RequestHandlerClass.state.applied
    serving = threading.Thread(target=server.serve_forever, daemon=True)

    def listen() -> None:
        server.server_activate()
        serving.start()

    server.listen = listen
    yield server
    if serving.is_alive():
        server.shutdown()


def test_a_lane_whose_target_stops_answering_pauses_then_resumes_when_it_answers(
    puts, target, recovering, settings, start_worker
):
    """After three connections refused in a row the worker says the lane is paused, and
    claims nothing more of it until the backoff has passed, while it carries out the
    work of other targets; once the target listens again, a trial goes through, the lane
    is no longer paused and every operation of it commits."""
    base = allow(settings, recovering.host)
    lane = f"http.request {recovering.host}"
    first = puts(base, FAILURES, "first")
    worker = start_worker("--lease-seconds", "2", **BREAKER)

    paused = wait_until(lambda: paused_lanes().get(lane), 30, "the lane paused", worker)
    assert paused["failures"] == FAILURES
    waiting = puts(base, 3, "waiting")
    elsewhere = puts(target.base, 1, "elsewhere")
    wait_until(lambda: all_committed(elsewhere), 30, "the other target's operation", worker)
    recovering.listen()
    wait_until(lambda: all_committed(first + waiting), 30, "the lane's operations", worker)
    wait_until(lambda: lane not in paused_lanes(), 10, "the lane resumed", worker)

    opened, retry_at = (datetime.fromisoformat(paused[key]) for key in ("since", "retry_at"))
    assert written(elsewhere, to_status="committed")[0] < retry_at
    claims = written(
        first + waiting, event__in=CLAIMS, to_status="in_flight", created_at__gt=opened
    )
    assert claims[0] >= retry_at  # Nothing of the lane was claimed while it was paused.
    assert applied_once(recovering, first + waiting)


# --- Alert deliveries do not hold up claims ---------------------------------------------


SEND_TIMEOUT = 10  # seconds: OVERSIGHT_EMAIL_TIMEOUT_SECONDS, OVERSIGHT_HTTP_TIMEOUT_SECONDS


def hanging_receiver(channel: str, host: str) -> tuple[str, dict[str, str]]:
    """The delivery's target at ``host``, and the worker's environment sending there."""
    if channel == AlertDelivery.Channel.WEBHOOK:
        return f"http://{host}/hook", {"OVERSIGHT_HTTP_TIMEOUT_SECONDS": str(SEND_TIMEOUT)}
    address, port = host.split(":")
    return "ops@example.com", {
        "DJANGO_SETTINGS_MODULE": "tests.smtp_settings",
        "OVERSIGHT_EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "OVERSIGHT_EMAIL_HOST": address,
        "OVERSIGHT_EMAIL_PORT": port,
        "OVERSIGHT_EMAIL_TIMEOUT_SECONDS": str(SEND_TIMEOUT),
    }


@pytest.mark.parametrize("channel", [AlertDelivery.Channel.EMAIL, AlertDelivery.Channel.WEBHOOK])
def test_an_alert_delivery_that_never_ends_does_not_delay_the_next_claim(
    run, approved, hanging, start_worker, channel
):
    """A mail server (or webhook) that accepts the connection and never answers holds
    the delivery for its timeout; an operation approved meanwhile is carried out at once,
    while that delivery still waits."""
    alert = Alert.objects.create(project=run.project, run=run, summary="Reconcile the ledger")
    receiver, env = hanging_receiver(channel, hanging.host)
    delivery = AlertDelivery.objects.create(
        alert=alert, channel=channel, target=receiver, next_attempt_at=db_now()
    )
    worker = start_worker(**env)
    wait_until(lambda: hanging.accepted, 30, "the delivery's connection", worker)

    op = approved("ledger")
    wait_until(lambda: all_committed([op]), 30, "the operation committed", worker)

    [decided] = written([op], to_status="approved")
    [committed] = written([op], to_status="committed")
    assert committed - decided < timedelta(seconds=SEND_TIMEOUT / 2)
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.last_error) == ("pending", 1, "")
