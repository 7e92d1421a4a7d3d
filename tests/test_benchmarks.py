"""Every benchmark under bench/ runs, at a tiny size, on the suite's database backend:
a benchmark that no longer runs is found here, not the day someone needs its figures.
The chaos soak also passes its own checks (no duplicate, lost or invented effect, no
leftover, invariants and audit chain intact), so this is CI's short soak."""

import os
import re
import subprocess
import sys

import pytest
from django.db import connection

from tests.processes import ROOT

pytestmark = pytest.mark.django_db(transaction=True)


def bench_env(var_dir) -> dict[str, str]:
    """The environment of a bench run by hand: its own settings and folder; on
    PostgreSQL, the (empty) test database."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("OVERSIGHT_", "DJANGO_", "DATABASE_URL"))
    }
    env["OVERSIGHT_VAR_DIR"] = str(var_dir)
    if connection.vendor == "postgresql":
        db = connection.settings_dict
        env["DATABASE_URL"] = (
            f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST'] or '127.0.0.1'}:"
            f"{db['PORT'] or 5432}/{db['NAME']}"
        )
    return env


def run_bench(script: str, *args: str, tmp_path, timeout: float = 240) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args],
        cwd=ROOT,
        env=bench_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_checkpoint_writes(tmp_path):
    out = run_bench("checkpoint_writes.py", "--runs", "3", "--messages", "2", tmp_path=tmp_path)
    assert f"database: {connection.vendor}" in out


def test_feed(tmp_path):
    out = run_bench("feed.py", "--runs", "3", "--events", "4", "--page", "5", tmp_path=tmp_path)
    assert f"database: {connection.vendor}" in out
    assert "feed events: 18, read: 18, gapless: True" in out


def test_worker_drain(tmp_path):
    out = run_bench("worker_drain.py", "--operations", "10", "--workers", "2", tmp_path=tmp_path)
    assert "committed 10, ledger entries 10" in out
    assert re.search(r"^raw durable commits: +[\d.]+ /s", out, re.M), out
    assert re.search(r"ops/s \(ratio 0\.\d{4} of the limit\)", out), out


def test_audit_queries(tmp_path):
    out = run_bench("audit_queries.py", "--runs", "50", "--checkpoints", "500", tmp_path=tmp_path)
    assert "full CSV export" in out


def test_chaos_soak(tmp_path):
    out = run_bench(
        "chaos_soak.py", "--seconds", "15", "--workers", "3", "--lease", "1", tmp_path=tmp_path
    )
    for clean in ("duplicates: 0", "lost effects: 0", "invented effects: 0", "leftovers: 0"):
        assert clean in out
    assert "check_invariants: pass" in out and "verify_audit_chain: pass" in out
    kills, stops = out.split("kills: ")[1].split("\n")[0].split(", stops past the lease: ")
    assert int(kills) > 0 and int(stops) > 0


def test_long_polls(tmp_path):
    out = run_bench("long_polls.py", "--waits", "6", "--wait-seconds", "1", tmp_path=tmp_path)
    assert re.search(r"200 answered after waiting +6 ", out), out
    assert re.search(r"/approvals/ during the waits: \d+ loads, statuses \[200\]", out), out


def test_langgraph_saver(tmp_path):
    out = run_bench(
        "langgraph_saver.py", "--steps", "20", "--cycles", "2", "--repeat", "1", tmp_path=tmp_path
    )
    assert f"database: {connection.vendor}" in out
    assert re.search(r"^invoke\+resume ms/cycle +[\d.,]+ +[\d.,]+ +[\d.]+$", out, re.M), out
