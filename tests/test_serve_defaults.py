"""What ``manage.py serve`` (``bin/serve``) starts with, read from the running server
rather than from the settings (docs/operating/deploying.md): it raises its open-files
limit to the system's most; by default it keeps 2 worker processes, each answering on
16 threads; on PostgreSQL each process borrows at most 20 connections."""

import os
import re
import resource
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.db import connection, transaction

from runs.models import Session
from tests.overlap import lock_waiters
from tests.processes import ROOT, Output, child_env, listening_port, wait_until

# A server started on the test's database must see the test's rows, and wait for a write
# lock only where the test holds one on purpose.
pytestmark = [pytest.mark.timeout(180), pytest.mark.django_db(transaction=True)]
LOW_SOFT_LIMIT = 256
_, HARD_LIMIT = resource.getrlimit(resource.RLIMIT_NOFILE)


@dataclass
class Served:
    port: int
    master: int
    workers: list[int]


def listening(server: subprocess.Popen, processes: int) -> Served:
    """The port gunicorn says it listens on (it binds port 0: no race for a free port)
    and its worker processes, once each says its application started."""
    output = Output(server.stderr)
    port = listening_port(output, server)

    def started() -> bool:
        return sum("Application startup complete" in line for line in output.lines) >= processes

    wait_until(started, message=f"{processes} processes starting", process=server)
    booted = (re.search(r"Booting worker with pid: (\d+)", line) for line in output.lines)
    return Served(port, server.pid, [int(found[1]) for found in booted if found])


@contextmanager
def serve(tmp_path: Path, *options: str, processes: int = 2, preexec_fn=None, **env: str):
    """``manage.py serve`` on this test's database with its defaults (no
    ``OVERSIGHT_WEB_*`` setting), on a port it picks itself, stopped at the end."""
    environ = {
        name: value for name, value in child_env().items() if not name.startswith("OVERSIGHT_WEB_")
    }
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--bind", "127.0.0.1:0", *options],
        cwd=ROOT,
        env=environ | {"OVERSIGHT_VAR_DIR": str(tmp_path)} | env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec_fn,
    )
    try:
        yield listening(server, processes)
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0


def children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def open_files_limit(pid: int) -> tuple[int, int]:
    """The soft and hard limits of open files of process ``pid``."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError(f"no open-files limit for {pid}")


def lower_open_files() -> None:
    """In the server's process before it starts: a soft limit far under the hard one,
    as many systems set it (1,024)."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (LOW_SOFT_LIMIT, HARD_LIMIT))


@pytest.mark.skipif(
    HARD_LIMIT == resource.RLIM_INFINITY or HARD_LIMIT <= LOW_SOFT_LIMIT,
    reason="needs a finite hard limit of open files above the lowered soft one",
)
def test_serve_raises_its_open_files_limit_to_the_hard_limit(tmp_path):
    with serve(tmp_path, preexec_fn=lower_open_files) as served:
        for pid in (served.master, *served.workers):
            assert open_files_limit(pid) == (HARD_LIMIT, HARD_LIMIT), pid


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


LISTEN = "0A"  # A socket's state in /proc/net/tcp.


def connections_to(pid: int, port: int) -> int:
    """Connections to ``port`` that process ``pid`` accepted and holds open (its sockets
    listed in /proc/net/tcp with that local port, but the listening one)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with suppress(FileNotFoundError):  # Closed since the listing.
            inodes.add(os.readlink(fd).removeprefix("socket:[").removesuffix("]"))
    found = 0
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        _, local, _, state, *_, inode = line.split()[:10]
        found += int(local.split(":")[1], 16) == port and state != LISTEN and inode in inodes
    return found


def answered_once_by_each(served: Served) -> None:
    """Each process answers one request, and one only: on PostgreSQL a process's first
    opens its pool of connections, which starts threads of its own, so threads are
    counted after it. The thread it ran on stays, idle: the first of the process's 16."""
    unanswered = set(served.workers)

    def taker() -> int | None:
        return next((pid for pid in served.workers if connections_to(pid, served.port)), None)

    def one_more_answered() -> bool:
        wait_until(lambda: taker() is None, message="the last connection closed")
        with socket.create_connection(("127.0.0.1", served.port), timeout=60) as asking:
            pid = wait_until(taker, message="a process taking the connection")
            if pid in unanswered:  # Else closed unused: the process makes no thread.
                healthz_on(asking)
                unanswered.discard(pid)
        return not unanswered

    wait_until(one_more_answered, message="a request answered by each process")


@contextmanager
def writes_held() -> Iterator[None]:
    """The database's writes wait for the end of the block: on SQLite every one (the
    block's BEGIN IMMEDIATE takes the database's one write lock; a write waits 20 s for
    it at most), on PostgreSQL those to the sessions' table."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(f"LOCK TABLE {Session._meta.db_table} IN EXCLUSIVE MODE")
        yield


def held_request(port: int, token: str) -> socket.socket:
    """An agent opening a session while ``writes_held``: a thread takes the request and
    waits for the database's writes (a request's thread is taken for as long as its
    request)."""
    body = b'{"title": "Held"}'
    held = socket.create_connection(("127.0.0.1", port), timeout=60)
    held.sendall(
        b"POST /api/v1/sessions HTTP/1.1\r\nHost: localhost\r\n"
        + f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n".encode()
        + b"Content-Type: application/json\r\n\r\n"
        + body
    )
    return held


HELD = 40


def test_serve_starts_2_processes_of_16_threads_by_default(tmp_path, agent_token):
    """Forty agents' requests held at once, each waiting for the database's writes the
    test holds: each process takes the requests it accepted on threads of its own until
    it has 16, and no more however many wait."""
    # On PostgreSQL, a held request waits for the lock as long as it takes.
    with serve(tmp_path, OVERSIGHT_DB_LOCK_WAIT_SECONDS="0") as served:
        assert len(served.workers) == 2
        assert sorted(children(served.master)) == sorted(served.workers)
        answered_once_by_each(served)
        # Each process's threads but the one its first request ran on.
        others = {pid: threads(pid) - 1 for pid in served.workers}

        def accepted(pid: int) -> int:
            return connections_to(pid, served.port)

        def for_requests() -> dict[int, int]:
            return {pid: threads(pid) - others[pid] for pid in served.workers}

        held = []
        try:
            with writes_held():
                held += [held_request(served.port, agent_token.plain) for _ in range(HELD)]
                wait_until(
                    lambda: sum(accepted(pid) for pid in served.workers) == HELD,
                    message="the processes taking every connection",
                )
                # Beyond 16 in a process, the rest wait for a thread (and at least its
                # first request's is there, idle).
                expected = {pid: max(min(accepted(pid), 16), 1) for pid in served.workers}
                assert max(accepted(pid) for pid in served.workers) > 16
                wait_until(
                    lambda: for_requests() == expected,
                    message="the threads answering reaching 16 per process",
                )
            for answer in held:
                assert answer.recv(12) == b"HTTP/1.1 201"  # Its session opened.
        finally:
            for answer in held:
                answer.close()
        assert for_requests() == expected


HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"


def healthz_on(asking: socket.socket) -> tuple[int, str]:
    """/healthz's status and body, asked on the connection ``asking``."""
    asking.sendall(HEALTHZ)
    answer = b""
    while chunk := asking.recv(65536):
        answer += chunk
    head, _, body = answer.decode().partition("\r\n\r\n")
    return int(head.split()[1]), body


def healthz(port: int) -> tuple[int, str]:
    with socket.create_connection(("127.0.0.1", port), timeout=120) as asking:
        return healthz_on(asking)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the pool is PostgreSQL's")
def test_serve_borrows_at_most_20_database_connections_per_process_by_default(tmp_path):
    """One process with more threads (25) than its pool: while the test holds the table
    /healthz reads, 20 of 25 requests wait on the lock holding a connection, and the 5
    others get none (the database is reported unavailable after the wait for one)."""
    with serve(
        tmp_path, "--processes", "1", "--threads", "25", processes=1,
        OVERSIGHT_DB_LOCK_WAIT_SECONDS="0",
    ) as served, ThreadPoolExecutor(25) as monitors:  # fmt: skip
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("LOCK TABLE runs_workerheartbeat IN ACCESS EXCLUSIVE MODE")
            answers = [monitors.submit(healthz, served.port) for _ in range(25)]
            wait_until(lambda: lock_waiters() >= 20, message="20 requests waiting on the lock")
            # Those without a connection are answered once their wait for one is over.
            wait_until(
                lambda: sum(answer.done() for answer in answers) == 5,
                message="the 5 requests left without a connection answered",
            )
            assert lock_waiters() == 20
        answered = [answer.result(timeout=60) for answer in answers]
    no_connection = [body for _, body in answered if '"database": {"ok": false' in body]
    assert len(no_connection) == 5, answered
