"""Every benchmark under bench/ runs, at a tiny size, on the suite's database backend:
a benchmark that no longer runs is found here, not the day someone needs its figures.
The chaos soak also passes its own checks (no duplicate, lost or invented effect, no
leftover, invariants and audit chain intact), so this is CI's short soak. Each run also
writes its figures with ``--json``, and the document says what the text says."""

import json
import os
import re
import subprocess
import sys
from contextlib import contextmanager

import pytest
from django.db import connection

from tests.processes import ROOT

pytestmark = pytest.mark.django_db(transaction=True)


def bench_env(var_dir, database: str | None = None) -> dict[str, str]:
    """The environment of a bench run by hand: its own settings and folder; on
    PostgreSQL, the (empty) test database, or ``database`` on the same server."""
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
            f"{db['PORT'] or 5432}/{database or db['NAME']}"
        )
    return env


def run_bench(
    script: str, *args: str, tmp_path, timeout: float = 240, database: str | None = None
) -> tuple[str, dict]:
    """The bench's printed text and its ``--json`` document, whose frame is checked
    here: this bench, this database, one figure a name, each a name, value and unit."""
    path = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args, "--json", str(path)],
        cwd=ROOT,
        env=bench_env(tmp_path, database),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    document = json.loads(path.read_text())
    assert list(document) == ["bench", "database", "arguments", "figures"]
    assert document["bench"] == script.removesuffix(".py")
    assert document["database"] == connection.vendor
    names = [figure["name"] for figure in document["figures"]]
    assert len(set(names)) == len(names), names
    assert all(list(figure) == ["name", "value", "unit"] for figure in document["figures"])
    return done.stdout, document


def by_name(document: dict) -> dict[str, dict]:
    """The document's figures: name -> {"value": ..., "unit": ...}."""
    return {f["name"]: {"value": f["value"], "unit": f["unit"]} for f in document["figures"]}


def printed(pattern: str, out: str) -> str:
    """The one group of ``pattern``, searched line by line in the printed text."""
    found = re.search(pattern, out, re.M)
    assert found, (pattern, out)
    return found.group(1)


def assert_limit(out: str, figures: dict, name: str) -> None:
    """The limit measured in the same run, and ``name``'s ratio to it, agree between
    the text and the JSON."""
    limit = figures["raw durable commits"]
    assert limit["unit"] == "commits/s"
    text = printed(
        r"^raw durable commits: +([\d.]+) /s \(one row per transaction; the limit\)$", out
    )
    assert text == f"{limit['value']:.1f}"
    ratio = figures[f"{name}: ratio to the limit"]
    assert ratio == {"value": figures[name]["value"] / limit["value"], "unit": "ratio"}
    text = printed(rf"^{re.escape(name)}[ :].* \(ratio (\d\.\d{{4}}) of the limit[;)]", out)
    assert text == f"{ratio['value']:.4f}"


def test_checkpoint_writes(tmp_path):
    out, document = run_bench(
        "checkpoint_writes.py", "--runs", "3", "--messages", "2", tmp_path=tmp_path
    )
    assert f"database: {connection.vendor}" in out
    assert document["arguments"] == {"runs": 3, "messages": 2}
    figures = by_name(document)
    for label, count, unit in (
        ("start run (2 checkpoints each)", 3, "runs"),
        ("append message", 6, "messages"),
        ("propose + approve (5 checkpoints each)", 3, "operations"),
        ("finish run (cancel op, 4 checkpoints each)", 3, "runs"),
    ):
        assert figures[f"{label}: {unit}"] == {"value": count, "unit": unit}
        assert figures[label]["unit"] == f"{unit}/s"
        assert_limit(out, figures, label)
    written = int(printed(r"^checkpoints written: (\d+)$", out))
    assert figures["checkpoints written"] == {"value": written, "unit": "checkpoints"}


def test_feed(tmp_path):
    out, document = run_bench(
        "feed.py", "--runs", "3", "--events", "4", "--page", "5", tmp_path=tmp_path
    )
    assert f"database: {connection.vendor}" in out
    assert "feed events: 18, read: 18, gapless: True" in out
    assert document["arguments"] == {"runs": 3, "events": 4, "page": 5}
    figures = by_name(document)
    assert figures["feed events"] == {"value": 18, "unit": "events"}
    assert figures["feed events: read"] == {"value": 18, "unit": "events"}
    assert figures["feed events: gapless"] == {"value": True, "unit": None}
    assert_limit(out, figures, "checkpoints, no token (no feed)")
    assert_limit(out, figures, "checkpoints with their feed events")
    assert figures["feed read through the API, 5 a page: events"] == {"value": 18, "unit": "events"}


@pytest.mark.parametrize("hot", [False, True])
def test_worker_drain(tmp_path, hot):
    out, document = run_bench(
        "worker_drain.py",
        "--operations",
        "12",
        "--workers",
        "2",
        "--saver-steps",
        "30",
        *(["--hot"] if hot else []),
        tmp_path=tmp_path,
    )
    assert "committed 12, ledger entries 12, B balances 12.00" in out
    assert ("one pair of accounts for all" if hot else "a pair of accounts per run") in out
    assert document["arguments"] == {
        "operations": 12,
        "workers": [2],
        "hot": hot,
        "saver_steps": 30,
    }
    figures = by_name(document)
    assert figures["2 worker(s): operations"] == {"value": 12, "unit": "operations"}
    beside = figures["2 worker(s): a state change beside it, p95"]
    assert beside["unit"] == "ms" and beside["value"] > 0
    assert printed(r"^2 worker\(s\), started .* beside them: .* p95 ([\d.]+), max", out) == (
        f"{beside['value']:.1f}"
    )
    shared = figures["2 worker(s): started before, beside state changes"]
    assert printed(r"^2 worker\(s\), started .* beside them: +([\d.]+) ops/s;", out) == (
        f"{shared['value']:.1f}"
    )
    assert figures["2 worker(s): committed"] == {"value": 12, "unit": "operations"}
    assert figures["2 worker(s): ledger entries"] == {"value": 12, "unit": "entries"}
    assert figures["2 worker(s): B balances"] == {"value": "12.00", "unit": "units"}
    rate = printed(r"^2 worker\(s\): 12 operations in +[\d.]+ s = +([\d.]+) ops/s", out)
    assert rate == f"{figures['2 worker(s)']['value']:.1f}"
    assert_limit(out, figures, "2 worker(s)")
    pace = figures["SqliteSaver's pace for three checkpoints"]
    assert printed(r"^SqliteSaver: .* three checkpoints ([\d.]+)/s$", out) == f"{pace['value']:.1f}"
    opened = figures["2 worker(s): started before the queue opens"]
    assert opened["unit"] == "ops/s"
    assert printed(r"^2 worker\(s\): .*; +([\d.]+) started before the queue opens\)", out) == (
        f"{opened['value']:.1f}"
    )
    paced = figures["2 worker(s): ratio to SqliteSaver's pace"]
    assert paced == {"value": figures["2 worker(s)"]["value"] / pace["value"], "unit": "ratio"}
    assert printed(r"^2 worker\(s\): .*; ([\d.]+)x SqliteSaver's pace;", out) == (
        f"{paced['value']:.2f}"
    )


@contextmanager
def database_of_its_own():
    """On PostgreSQL, an empty database beside the suite's, dropped after; None on
    SQLite, where a bench works on a file in its own folder."""
    if connection.vendor != "postgresql":
        yield None
        return
    name = f"{connection.settings_dict['NAME']}_bench"
    with connection._nodb_cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')
        cursor.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with connection._nodb_cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')


def test_database_share(tmp_path):
    # The bench copies its database, which PostgreSQL does only with nobody else
    # connected to it: not the suite's, which other tests' connections may linger on.
    with database_of_its_own() as database:
        out, document = run_bench(
            "database_share.py", "--operations", "6", tmp_path=tmp_path, database=database
        )
    assert f"database: {connection.vendor}" in out
    assert (
        "the replay left the copy as the drain left the database: 6 committed, "
        "6 ledger entries, the same last checkpoint hash"
    ) in out
    assert document["arguments"] == {"operations": 6}
    figures = by_name(document)
    assert figures["one worker: operations"] == {"value": 6, "unit": "operations"}
    assert_limit(out, figures, "one worker")
    assert_limit(out, figures, "the same statements replayed")
    insert = printed(r"^  INSERT runs_checkpoint +([\d.]+) ms$", out)
    assert insert == f"{figures['replayed INSERT runs_checkpoint']['value']:.3f}"


def test_approval_latency(tmp_path):
    out, document = run_bench("approval_latency.py", "--samples", "3", tmp_path=tmp_path)
    assert f"database: {connection.vendor}" in out
    assert document["arguments"] == {"samples": 3}
    figures = by_name(document)
    assert figures["approvals"] == {"value": 3, "unit": "approvals"}
    for where in ("commit", "the agent"):
        median = figures[f"approval to {where}: median"]
        worst = figures[f"approval to {where}: max"]
        assert median["unit"] == worst["unit"] == "ms" and 0 < median["value"] <= worst["value"]
        text = printed(rf"^approval to {where}, idle worker: median ([\d.]+) ms, ", out)
        assert text == f"{median['value']:.1f}"
    assert "over 3 approvals" in out


def test_audit_queries(tmp_path):
    out, document = run_bench(
        "audit_queries.py", "--runs", "50", "--checkpoints", "500", tmp_path=tmp_path
    )
    assert document["arguments"] == {"runs": 50, "checkpoints": 500}
    figures = by_name(document)
    lines = printed(r"^full CSV export +[\d.]+ s +(\d+) lines", out)
    assert figures["full CSV export: lines"] == {"value": int(lines), "unit": "lines"}
    rows = printed(r"^latest checkpoints \(no filter\) .* queries +(\d+) rows$", out)
    assert figures["latest checkpoints (no filter): rows"] == {"value": int(rows), "unit": "rows"}
    assert int(rows) == 50  # A full first page.


def test_chaos_soak(tmp_path):
    """At CI's size, with a margin for a machine running two suites at once: a worker
    stopped inside a lock is then woken only after the soak (two to four times 24 s), so
    a stall without a bound still shows, as a leftover or an operation held up."""
    out, document = run_bench(
        *("chaos_soak.py", "--seconds", "15", "--workers", "3", "--lease", "1"),
        *("--stop-inside", "0.2", "--margin", "20"),
        tmp_path=tmp_path,
    )
    clean = ("duplicates: 0", "lost effects: 0", "invented effects: 0", "leftovers: 0")
    for line in (*clean, "held up: 0"):
        assert line in out
    assert "check_invariants: pass" in out and "verify_audit_chain: pass" in out
    kills, stops = out.split("kills: ")[1].split("\n")[0].split(", stops past the lease: ")
    assert int(kills) > 0 and int(stops) > 0
    assert document["arguments"] == {
        "seconds": 15,
        "workers": 3,
        "lease": 1,
        "strike_every": 1.0,
        "seed": 2026,
        "stop_inside": 0.2,
        "stall_bound": 3,
        "margin": 20,
    }
    figures = by_name(document)
    for label in ("duplicates", "lost effects", "invented effects", "leftovers", "held up"):
        assert figures[label] == {"value": 0, "unit": "items"}
    assert figures["stops inside a lock"]["value"] > 0
    assert figures["check_invariants passed"] == {"value": True, "unit": None}
    assert figures["verify_audit_chain passed"] == {"value": True, "unit": None}
    assert figures["kills"] == {"value": int(kills), "unit": "kills"}
    assert figures["stops past the lease"] == {"value": int(stops), "unit": "stops"}
    operations = printed(r"^operations: (\d+) in ", out)
    assert figures["operations"] == {"value": int(operations), "unit": "operations"}


def test_long_polls(tmp_path):
    out, document = run_bench(
        "long_polls.py", "--waits", "6", "--wait-seconds", "1", tmp_path=tmp_path
    )
    assert re.search(r"200 answered after waiting +6 ", out), out
    loads = printed(r"/approvals/ during the waits: (\d+) loads, statuses \[200\]", out)
    assert document["arguments"] == {"server": "serve", "waits": 6, "wait_seconds": 1}
    figures = by_name(document)
    assert figures["200 answered after waiting"] == {"value": 6, "unit": "waits"}
    assert figures["/approvals/ during the waits: loads"] == {"value": int(loads), "unit": "loads"}
    assert figures["/approvals/ during the waits: statuses"] == {"value": [200], "unit": None}


def test_pages_under_load(tmp_path):
    out, document = run_bench(
        "pages_under_load.py",
        *("--runs", "20", "--checkpoints", "200", "--pending", "5", "--long-run", "30"),
        *("--load", "1", "--samples", "3"),
        tmp_path=tmp_path,
    )
    assert document["arguments"] == {
        "runs": 20,
        "checkpoints": 200,
        "pending": 5,
        "long_run": 30,
        "load": 1,
        "samples": 3,
    }
    figures = by_name(document)
    row = printed(r"^(/runs/<id>/ \(30 checkpoints\) .*)$", out).split()[-6:]
    for n, when in enumerate(("alone", "under load")):
        for k, p in enumerate((50, 95, 99)):
            figure = figures[f"/runs/<id>/ (30 checkpoints) {when}: p{p}"]
            assert figure["unit"] == "ms" and f"{figure['value']:.1f}" == row[3 * n + k]
    answered = int(printed(r"^second process: (\d+) pages in ", out))
    assert answered > 0
    assert figures["second process: pages answered"]["unit"] == "pages/s"


def test_langgraph_saver(tmp_path):
    out, document = run_bench(
        "langgraph_saver.py", "--steps", "20", "--cycles", "2", "--repeat", "1", tmp_path=tmp_path
    )
    assert f"database: {connection.vendor}" in out
    assert re.search(r"^invoke\+resume ms/cycle +[\d.,]+ +[\d.,]+ +[\d.]+$", out, re.M), out
    assert document["arguments"] == {"steps": 20, "cycles": 2, "repeat": 1}
    figures = by_name(document)
    base, mine = figures["invoke+resume: SqliteSaver"], figures["invoke+resume: Oversight"]
    assert base["unit"] == mine["unit"] == "ms/cycle"
    ratio = figures["invoke+resume: ratio (above 1: Oversight is faster)"]
    assert ratio == {"value": base["value"] / mine["value"], "unit": "ratio"}
    text = printed(r"^invoke\+resume ms/cycle +[\d.,]+ +[\d.,]+ +([\d.]+)$", out)
    assert text == f"{ratio['value']:.2f}"


def test_slow_targets(tmp_path):
    out, document = run_bench(
        "slow_targets.py",
        *("--operations", "4", "--latency", "20", "--hanging", "1", "--deadline", "1"),
        *("--effects", "4"),
        tmp_path=tmp_path,
    )
    assert document["arguments"] == {
        "operations": 4,
        "latency": 20,
        "hanging": 1,
        "deadline": 1,
        "workers": 1,
        "effects": 4,
    }
    figures = by_name(document)
    for name in ("alone", "behind 1 hanging"):
        assert figures[f"{name}: committed"] == {"value": 4, "unit": "operations"}
        requests = figures[f"{name}: requests per operation"]["value"]
        ceiling = figures[f"{name}: 4 effects at once at most"]["value"]
        assert ceiling == pytest.approx(4 / (requests * 0.020))
        rate = printed(rf"^ +{name}: 4 operations at 20 ms in +[\d.]+ s = +([\d.]+) ops/s", out)
        assert rate == f"{figures[f'{name}: healthy operations']['value']:.2f}"
    assert figures["effects applied twice"] == {"value": 0, "unit": "effects"}
