"""A server of Oversight for the benches that go through HTTP: started on a free port of
loopback, quietly, and stopped at the end.

    with serving("serve") as base:   # "http://127.0.0.1:PORT", once it answers
        status, seconds = get(f"{base}/healthz", {}, 1)
"""

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START_SECONDS = 60


def server_command(server: str, port: int) -> list[str]:
    bind = f"127.0.0.1:{port}"
    return {
        "serve": [sys.executable, "manage.py", "serve", "--bind", bind],
        "runserver": [sys.executable, "manage.py", "runserver", "--noreload", bind],
        "gunicorn-sync": [
            sys.executable,
            "-m",
            "gunicorn",
            "-w",
            "2",
            "-b",
            bind,
            "oversight.wsgi",
        ],
    }[server]


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as spare:
        return spare.getsockname()[1]


def get(url: str, headers: dict, timeout: float) -> tuple[int, float]:
    """The status of a GET (0 for no answer in time, or a failed connection) and the
    seconds it took."""
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=timeout
        ) as r:
            r.read()
            status = r.status
    except urllib.error.HTTPError as error:
        status = error.code
    except OSError:
        status = 0  # No answer in time, or the connection failed.
    return status, time.perf_counter() - started


@contextmanager
def serving(server: str) -> Iterator[str]:
    """Run ``server`` (see ``server_command``) with this process's environment until the
    block ends; yields its base URL once ``/healthz`` answers at all (503 too: a bench
    may run no worker)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    process = subprocess.Popen(server_command(server, port), cwd=ROOT, **quiet)
    try:
        started = time.monotonic()
        while get(f"{base}/healthz", {}, 1)[0] not in (200, 503):
            if process.poll() is not None or time.monotonic() - started > START_SECONDS:
                raise SystemExit(f"the server ({server}) did not start")
            time.sleep(0.2)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=START_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
