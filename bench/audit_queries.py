"""How fast an auditor's questions are answered over a large history.

Fills a throwaway database (SQLite, or DATABASE_URL's) with --checkpoints checkpoints
over --runs runs in five projects, then times, through the real views as a signed-in
auditor, the five most common audit queries, a page deep in the history, a
checkpoint page, and a full CSV export of every checkpoint.

    .venv/bin/python bench/audit_queries.py [--runs 50000] [--checkpoints 1000000]

The filler rows are written with bulk inserts, not through the services (that would
take hours); their hashes are random, so the chains are not valid, which no query
here looks at.
"""

import argparse
import os
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.environment import start_django

start_django(OVERSIGHT_ALLOWED_HOSTS="testserver")

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from bench.report import Figures, add_json_option  # noqa: E402
from runs.audit.search import SORTS, encode_cursor  # noqa: E402
from runs.models import Checkpoint, Operation, Project, Role, Run, Session  # noqa: E402
from runs.permissions import role_group  # noqa: E402

BATCH = 5000
NOW = datetime(2026, 11, 29, tzinfo=UTC)
SPAN = timedelta(days=365)
ACTIONS = ["file.write", "ledger.transfer", "email.send", "http.request"]
REVIEWERS = [f"reviewer-{n}" for n in range(20)]
# One run's checkpoints, in order, as (event, from, to, actor kind). The shape of a
# run that proposes one operation, gets it approved and executes it.
LIFE = [
    ("run.created", "", "queued", "agent"),
    ("run.status", "queued", "running", "agent"),
    ("operation.proposed", "", "proposed", "agent"),
    ("run.status", "running", "waiting", "agent"),
    ("operation.status", "proposed", "approved", "user"),
    ("run.status", "waiting", "queued", "user"),
    ("operation.status", "approved", "in_flight", "worker"),
    ("operation.intent", "in_flight", "in_flight", "worker"),
    ("operation.status", "in_flight", "committed", "worker"),
    ("run.status", "queued", "running", "agent"),
]
COMMENTS = ["looks right", "checked with finance", "ok for this sprint", "fine", ""]


def fill(runs: int, checkpoints: int) -> None:
    rng = random.Random(14)
    User = get_user_model()
    owner = User.objects.create_user("bench-owner")
    users = {name: User.objects.create_user(name) for name in REVIEWERS}
    projects = [Project.objects.create(slug=f"p{n}", name=f"Project {n}") for n in range(5)]
    sessions = Session.objects.bulk_create(
        Session(project=projects[n % 5], owner=owner, agent=f"agent-{n % 7}") for n in range(1000)
    )
    per_run = checkpoints // runs
    started = time.perf_counter()
    for first in range(0, runs, BATCH):
        with transaction.atomic():
            batch = Run.objects.bulk_create(
                Run(
                    project=session.project,
                    session=session,
                    goal=f"bench goal {n}",
                    status="running",
                    version=per_run,
                )
                for n in range(first, min(first + BATCH, runs))
                for session in [sessions[n % len(sessions)]]
            )
            operations = Operation.objects.bulk_create(_operation(rng, run) for run in batch)
            rows = []
            for run, operation in zip(batch, operations, strict=True):
                rows.extend(_checkpoints(rng, run, operation, per_run, users))
            Checkpoint.objects.bulk_create(rows, batch_size=BATCH)
        done = min(first + BATCH, runs)
        print(f"  filled {done:>6} runs, {done * per_run:>8} checkpoints", end="\r", flush=True)
    print(f"\nfilled in {time.perf_counter() - started:.0f} s")
    auditor = User.objects.create_user("auditor")
    for project in projects[:4]:  # A member of four of the five projects.
        project.memberships.create(user=auditor, role=role_group(Role.AUDITOR))


def _operation(rng: random.Random, run: Run) -> Operation:
    return Operation(
        run=run,
        project_id=run.project_id,
        call_id="c1",
        action=rng.choice(ACTIONS),
        proposed_arguments={},
        arguments={},
        arguments_hash="0" * 64,
        idempotency_key=f"{run.pk:032x}",
        risk=rng.choice(["low", "medium", "medium", "high"]),
        rollback_kind="in_band",
        required_approvals=1,
        base_version=2,
        status="committed",
        expires_at=NOW,
    )


def _checkpoints(rng, run, operation, count, users):
    start = NOW - SPAN * rng.random()
    reviewer = rng.choice(REVIEWERS)
    failed = rng.random() < 0.02  # Two runs in a hundred fail verification.
    for seq in range(1, count + 1):
        event, before, after, kind = LIFE[(seq - 1) % len(LIFE)]
        if failed and after == "committed":
            after = "verify_failed"
        state = {"run": {"status": "running", "version": seq}, "pending_operations": []}
        reason = ""
        if kind == "user":
            comment = rng.choice(COMMENTS)
            state["decision"] = {"kind": "approve", "by": reviewer, "comment": comment}
            reason = comment or "approved"
        elif after == "verify_failed":
            reason = "verification found the effect missing"
        yield Checkpoint(
            run=run,
            project_id=run.project_id,
            seq=seq,
            created_at=start + timedelta(seconds=seq),
            actor_kind=kind,
            actor_user=users[reviewer] if kind == "user" else None,
            actor_label={"user": reviewer, "worker": "worker-1"}.get(kind, "agent"),
            operation=operation if event.startswith("operation") else None,
            event=event,
            from_status=before,
            to_status=after,
            reason=reason,
            state=state,
            prev_hash=rng.randbytes(32).hex(),
            hash=rng.randbytes(32).hex(),
        )


def timed_get(figures: Figures, client: Client, label: str, url: str, repeat: int = 5) -> None:
    """GET over HTTPS, as in production (plain HTTP is redirected when debug is off)."""
    times = []
    for _ in range(repeat):
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            response = client.get(url, secure=True)
            times.append(time.perf_counter() - started)
        assert response.status_code == 200, (url, response.status_code)
    rows = response.content.count(b'href="/audit/checkpoints/')
    first = figures.add(f"{label}: first", times[0] * 1000, "ms")
    median = figures.add(f"{label}: median", statistics.median(times) * 1000, "ms")
    figures.add(f"{label}: queries", len(queries), "queries")
    figures.add(f"{label}: rows", rows, "rows")
    print(
        f"{label:<44} first {first:7.1f} ms  median {median:7.1f} ms"
        f"  {len(queries):>2} queries  {rows:>3} rows"
    )


def export(figures: Figures, client: Client) -> None:
    started = time.perf_counter()
    response = client.get("/audit/export.csv", secure=True)
    size = lines = 0
    before = highest = _rss_mb()
    sample_at = 10_000
    for chunk in response.streaming_content:
        size += len(chunk)
        lines += chunk.count(b"\n")
        if lines >= sample_at:  # Chunks hold many lines: look at memory every 10,000.
            highest = max(highest, _rss_mb())
            sample_at += 10_000
    elapsed = time.perf_counter() - started
    label = "full CSV export"
    figures.add(f"{label}: seconds", elapsed, "s")
    figures.add(f"{label}: lines", lines, "lines")
    figures.add(f"{label}: size", size / 2**20, "MB")
    figures.add(f"{label}: memory before", before, "MB")
    figures.add(f"{label}: memory at most", highest, "MB")
    print(
        f"{label:<44} {elapsed:7.1f} s  {lines:>8} lines  {size / 2**20:5.0f} MB"
        f"  memory {before:.0f} MB before, at most {highest:.0f} MB during"
    )


def _rss_mb() -> float:
    """The process's resident memory now (Linux)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> None:
    parser = add_json_option(argparse.ArgumentParser())
    parser.add_argument("--runs", type=int, default=50_000)
    parser.add_argument("--checkpoints", type=int, default=1_000_000)
    args = parser.parse_args()
    figures = Figures(__file__, args)
    print(f"database: {connection.vendor} {connection.settings_dict['NAME']}")
    call_command("migrate", verbosity=0)
    call_command("collectstatic", interactive=False, verbosity=0)
    if not Checkpoint.objects.exists():
        fill(args.runs, args.checkpoints)
    client = Client(HTTP_HOST="testserver")
    client.force_login(get_user_model().objects.get(username="auditor"))
    run = Run.objects.filter(project__slug="p1").order_by("pk")[args.runs // 10]
    middle = Checkpoint.objects.order_by("-created_at", "-id")[args.checkpoints // 2]
    deep = encode_cursor(SORTS["newest"].key(middle))
    timed_get(figures, client, "latest checkpoints (no filter)", "/audit/")
    timed_get(
        figures,
        client,
        "reviewer-3's approvals in November",
        "/audit/?actor=reviewer-3&decision=approve&since=2026-11-01&until=2026-11-30",
    )
    timed_get(
        figures,
        client,
        "verification failures last quarter",
        "/audit/?status=verify_failed&since=2026-07-01&until=2026-09-30",
    )
    timed_get(figures, client, "one run's chain, in order", f"/audit/?run={run.pk}&sort=run")
    timed_get(figures, client, "free text in reasons and comments", "/audit/?q=finance")
    timed_get(figures, client, "free text that matches nothing", "/audit/?q=zzyzx")
    timed_get(
        figures, client, f"a page {args.checkpoints // 2:,} rows deep", f"/audit/?after={deep}"
    )
    timed_get(
        figures, client, "a checkpoint page with its diff", f"/audit/checkpoints/{middle.pk}/"
    )
    export(figures, client)
    figures.write()


if __name__ == "__main__":
    main()
