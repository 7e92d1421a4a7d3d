"""Run real child processes against the test database (crash and concurrency tests)."""

import os
import subprocess
import sys
from pathlib import Path

from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def spawn(*args: str) -> subprocess.Popen:
    """Start ``python -m tests.child ARGS`` connected to this test run's database."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "OVERSIGHT_TEST_DB_NAME": connection.settings_dict["NAME"],
        "PYTHONUNBUFFERED": "1",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "tests.child", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_line(process: subprocess.Popen, expected: str) -> None:
    line = process.stdout.readline().strip()
    if line != expected:
        process.kill()
        raise AssertionError(f"child said {line!r}, not {expected!r}: {process.stderr.read()}")
