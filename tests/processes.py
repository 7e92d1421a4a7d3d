"""Run real child processes against the test database (crash and concurrency tests)."""

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A loopback port nobody listens on, for a server that cannot be started on port 0
    and say which port it got (the demo tells its agents its address first). Another
    process may take it before the server binds it: the test then starts again on
    another (tests/test_demo_langgraph.py)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# How often ``wait_until`` looks again: the one pause of the suite that waits for
# another process or thread (tests/test_suite_hygiene.py).
POLL_SECONDS = 0.05


def wait_until[T](
    condition: Callable[[], T],
    timeout: float = 60,
    message: str = "the condition",
    process: subprocess.Popen | None = None,
) -> T:
    """``condition()``'s first true value, looked for again and again: a test waits for
    what it waits for (a row, a line, a status), never for a guess of how long it takes.
    The deadline is generous, as the suite runs on a loaded machine; ``process``, if
    given, must stay alive meanwhile (its error output says why it did not)."""
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        if process is not None and process.poll() is not None:
            raise AssertionError(f"exited before {message}: {_stderr_of(process)}")
        assert time.monotonic() < deadline, f"{message} did not happen within {timeout} s"
        time.sleep(POLL_SECONDS)
    return found


def _stderr_of(process: subprocess.Popen) -> str:
    return process.stderr.read()[-3000:] if process.stderr else ""


class Output:
    """What a child process writes to a pipe, read by a thread as it comes: a test
    waits for a line with a deadline (``readline`` alone would wait for ever on a child
    that hangs) and still has every line at the end."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def find(self, pattern: str) -> re.Match | None:
        """The first line matching ``pattern`` so far."""
        return next(filter(None, (re.search(pattern, line) for line in list(self.lines))), None)

    def wait_for(self, pattern: str, process: subprocess.Popen, timeout: float = 60) -> re.Match:
        return wait_until(lambda: self.find(pattern), timeout, repr(pattern), process)

    def text(self, timeout: float = 60) -> str:
        """Everything written, once the pipe has closed (the process has exited)."""
        self._reader.join(timeout)
        return "\n".join(self.lines)


# The line a server started on port 0 writes once it listens, with the port the system
# gave it: gunicorn's (``serve --bind 127.0.0.1:0``) or runserver's (``127.0.0.1:0``).
LISTENING = r"(?:Listening at: |development server at )http://[^:\s]+:(\d+)"


def listening_port(output: Output, server: subprocess.Popen) -> int:
    """The port a server started on port 0 says it was given: no other process can take
    it between the test's choice and the server's bind, as it could a port found free."""
    return int(output.wait_for(LISTENING, server)[1])


ASYNC_UNSAFE = "DJANGO_ALLOW_ASYNC_UNSAFE"


def child_env() -> dict[str, str]:
    """The environment of a child process that shares this test's database and
    settings (workspace, artifact store, HTTP allow-list). Django's async-safety check
    is on in it, as in production, even when a browser test (whose Playwright needs it
    off in the test's own thread) starts it."""
    inherited = {name: value for name, value in os.environ.items() if name != ASYNC_UNSAFE}
    return {
        **inherited,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "OVERSIGHT_TEST_DB_NAME": connection.settings_dict["NAME"],
        "OVERSIGHT_WORKSPACE": str(settings.OVERSIGHT_WORKSPACE),
        "OVERSIGHT_ARTIFACT_ROOT": str(settings.OVERSIGHT_ARTIFACT_ROOT),
        "OVERSIGHT_HTTP_ALLOWED_HOSTS": ",".join(settings.OVERSIGHT_HTTP_ALLOWED_HOSTS),
        "OVERSIGHT_HTTP_DEDUPLICATING_HOSTS": ",".join(settings.OVERSIGHT_HTTP_DEDUPLICATING_HOSTS),
        "PYTHONUNBUFFERED": "1",
    }


def spawn(*args: str, **env: str) -> subprocess.Popen:
    """Start ``python -m tests.child ARGS`` connected to this test run's database (with
    ``env`` added to its environment)."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.child", *args],
        cwd=ROOT,
        env={**child_env(), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def manage_started(
    *args: str, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **env: str
) -> subprocess.Popen:
    """``manage.py ARGS`` started against this test run's database (with ``env`` added to
    its environment), not waited for (``communicate`` reads what it says). A child that
    logs as it runs needs its output read as it comes (``Output``), or sent elsewhere
    (``stdout``, ``stderr``): a pipe nobody reads fills up and stops it."""
    return subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**child_env(), **env},
        stdout=stdout,
        stderr=stderr,
        text=True,
    )


def manage(*args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    """Run ``manage.py ARGS`` to completion against this test run's database (with
    ``env`` added to its environment)."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**child_env(), **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# A test of a fresh installation (``clean_env``: SQLite, whatever this run's database)
# is the same test in the suite's PostgreSQL run, where it would only take the
# machine's cores from that run: it runs in the SQLite one.
FRESH_INSTALLATION = pytest.mark.skipif(
    connection.vendor == "postgresql",
    reason="a fresh installation runs on SQLite whatever the suite's database",
)


def clean_env(var_dir) -> dict[str, str]:
    """This process's environment without any setting of Oversight's or Django's: only
    where a fresh installation lives (the README's default is the checkout's var/)."""
    kept = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("OVERSIGHT_", "DJANGO_", "DATABASE_URL"))
    }
    return kept | {"OVERSIGHT_VAR_DIR": str(var_dir)}


def manage_in(line: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run the command line ``manage.py LINE`` as written, in ``env`` alone (a fresh
    installation's, from ``clean_env``), not against this test run's database."""
    return subprocess.run(
        [sys.executable, "manage.py", *shlex.split(line)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def wait_for_line(process: subprocess.Popen, expected: str) -> None:
    """The child's next line is ``expected`` (a child that hangs is killed by the test's
    timeout)."""
    line = process.stdout.readline().strip()
    if line != expected:
        process.kill()
        raise AssertionError(f"child said {line!r}, not {expected!r}: {process.stderr.read()}")


# The child workers of tests.child hold one-second leases.
CHILD_LEASE_LAPSED = 1.3


def crash_worker_at(boundary: str, sabotage: str = "", *, step_by_step: bool = False) -> None:
    """A worker process that kills itself (SIGKILL) at ``boundary`` of the protocol
    (``step_by_step``: even for an effect inside the database)."""
    options = [*([sabotage] if sabotage else []), *(["--step-by-step"] if step_by_step else [])]
    child = spawn("worker-crash-at", boundary, *options)
    assert child.wait(timeout=60) == -signal.SIGKILL, child.stderr.read()


def leases_lapsed() -> None:
    """Wait until no operation's lease runs any more, in the database's clock: a child
    worker's, killed or paused, has run out."""
    # Imported here: agent children import this module without setting Django up.
    from runs.clock import db_now
    from runs.models import Operation

    def lapsed() -> bool:
        return not Operation.objects.filter(lease_expires_at__gt=db_now()).exists()

    wait_until(lapsed, message="the leases running out")


def take_over(**env: str) -> None:
    """Another worker process, once a child worker's lease has lapsed, drains what is
    ready (with ``env`` added to its environment)."""
    leases_lapsed()
    done = manage("runworker", "--once", "--lease-seconds", "5", **env)
    assert done.returncode == 0, done.stderr


def agent_child(
    script: str, base: str, token: str, name: str, state: Path, *options: str, **env: str
) -> subprocess.Popen:
    """An example agent as a child process (``script``, a test's wrapper around it) on
    the run or thread ``name``, keeping its files in ``state``, with ``options`` and
    ``env`` added to its environment."""
    return subprocess.Popen(
        [sys.executable, script, base, name, "--state", str(state), *options],
        cwd=ROOT,
        env={**child_env(), "PYTHONPATH": str(ROOT), "OVERSIGHT_TOKEN": token, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def said(process: subprocess.Popen) -> str:
    """The agent's next line; its error output if it said nothing (it died)."""
    line = process.stdout.readline().strip()
    if not line:
        process.kill()
        raise AssertionError(f"the agent said nothing: {process.stderr.read()[-3000:]}")
    return line


def eventually(find, what: str, process: subprocess.Popen, seconds: float = 60):
    """``find()``'s first true value, polled while the agent ``process`` lives."""
    return wait_until(find, seconds, what, process)
