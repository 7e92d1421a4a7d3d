"""The reviewers' and auditors' pages at scale, through the production server, alone
and under load from a second process.

Fills a throwaway database (SQLite, or DATABASE_URL's, given empty) as
``bench/audit_queries.py`` does (--checkpoints over --runs), then adds --pending
operations awaiting approval and one run of --long-run checkpoints (on PostgreSQL,
then ANALYZE, as autovacuum would soon after). Starts ``serve`` on it and signs in a
reviewer of every project. Each page is then loaded --samples times one request at a
time: alone, and again while a second process keeps --load connections loading the
same pages. Prints p50 / p95 / p99 of each page's time to its whole answer, and the
pages per second the second process got.

    .venv/bin/python bench/pages_under_load.py [--runs 50000] [--checkpoints 1000000]
        [--pending 10000] [--long-run 5000] [--load 4] [--samples 100]
"""

import argparse
import multiprocessing
import os
import random
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.environment import start_django

start_django(production_http=True, OVERSIGHT_ALLOWED_HOSTS="127.0.0.1")

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, connections, transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

from bench.audit_queries import _checkpoints, _operation, fill  # noqa: E402
from bench.report import Figures, add_json_option, percentile  # noqa: E402
from bench.server import get, serving  # noqa: E402
from runs.models import Checkpoint, Operation, Project, Role, Run, Session  # noqa: E402
from runs.permissions import role_group  # noqa: E402

GOAL_P95_MS = 50


def fill_queue(pending: int, long_run: int) -> tuple[int, int]:
    """``pending`` operations awaiting approval, each in a waiting run of its own, and
    one run of ``long_run`` checkpoints: the queue's first operation and that run."""
    rng = random.Random(17)
    users = {u.username: u for u in get_user_model().objects.filter(username__startswith="rev")}
    session = Session.objects.filter(project__slug="p0").first()
    with transaction.atomic():
        runs = Run.objects.bulk_create(
            Run(
                project=session.project,
                session=session,
                goal=f"queue {n}",
                status=Run.Status.WAITING,
                reason=Run.Reason.APPROVAL,
                unblock="a reviewer's decision",
                version=3,
            )
            for n in range(pending + 1)
        )
        Run.objects.filter(pk=runs[0].pk).update(
            status=Run.Status.RUNNING, reason="", unblock="", version=long_run
        )
        operations = Operation.objects.bulk_create(_operation(rng, run) for run in runs)
        expires = timezone.now() + timedelta(days=30)
        Operation.objects.filter(pk__in=[op.pk for op in operations[1:]]).update(
            status=Operation.Status.PROPOSED, expires_at=expires
        )
        rows = [
            row
            for run, operation in zip(runs[1:], operations[1:], strict=True)
            for row in _checkpoints(rng, run, operation, 3, users)
        ]
        rows.extend(_checkpoints(rng, runs[0], operations[0], long_run, users))
        Checkpoint.objects.bulk_create(rows, batch_size=5000)
    return operations[1].pk, runs[0].pk


def settle() -> None:
    """What a deployment has long done before a reviewer opens a page after a bulk
    load: on PostgreSQL, the planner's statistics (autovacuum, within a minute); on
    SQLite, the write-ahead log copied into the database; and the fill's writes on the
    disk. Without it the first pages timed raced the write-back of half a gigabyte
    (an operation's page at p95 49.9 ms in one run, 37.2 in the next on the same
    database)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("ANALYZE")
        else:
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    os.sync()


def signed_in() -> str:
    """The session cookie of a reviewer of every project."""
    reviewer = get_user_model().objects.create_user("bench-reviewer")
    for project in Project.objects.all():
        project.memberships.create(user=reviewer, role=role_group(Role.REVIEWER))
    client = Client()
    client.force_login(reviewer)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


def timed(base: str, cookie: str, path: str, samples: int) -> list[float]:
    """Milliseconds of each of ``samples`` loads of ``path``, one after another."""
    times = []
    for _ in range(samples):
        status, seconds = get(f"{base}{path}", {"Cookie": cookie}, 30)
        if status != 200:
            raise SystemExit(f"{path} answered {status}, not 200")
        times.append(seconds * 1000)
    return times


def load(base: str, cookie: str, paths: list[str], connections_: int, events, done) -> None:
    """The second process: ``connections_`` threads loading the pages at random, from
    when it sets the first of ``events`` (ready) until the second (stop) is set;
    ``done`` gets how many pages were answered (200) and the seconds."""
    ready, stop = events
    counts = [0] * connections_

    def keep_loading(n: int) -> None:
        rng = random.Random(n)
        while not stop.is_set():
            status, _ = get(f"{base}{rng.choice(paths)}", {"Cookie": cookie}, 30)
            counts[n] += status == 200

    started = time.perf_counter()
    threads = [threading.Thread(target=keep_loading, args=(n,)) for n in range(connections_)]
    for thread in threads:
        thread.start()
    ready.set()
    for thread in threads:
        thread.join()
    done.put((sum(counts), time.perf_counter() - started))


def main() -> None:
    parser = add_json_option(argparse.ArgumentParser())
    parser.add_argument("--runs", type=int, default=50_000)
    parser.add_argument("--checkpoints", type=int, default=1_000_000)
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--long-run", type=int, default=5_000)
    parser.add_argument("--load", type=int, default=4, help="the second process's connections")
    parser.add_argument("--samples", type=int, default=100)
    args = parser.parse_args()
    figures = Figures(__file__, args)
    print(f"database: {connection.vendor} {connection.settings_dict['NAME']}")
    call_command("migrate", verbosity=0)
    if Checkpoint.objects.exists():
        raise SystemExit("give this bench an empty database")
    fill(args.runs, args.checkpoints)
    operation, long_run = fill_queue(args.pending, args.long_run)
    settle()
    cookie = signed_in()
    pages = {
        "/approvals/": "/approvals/",
        "/operations/<id>/": f"/operations/{operation}/",
        "/runs/": "/runs/",
        f"/runs/<id>/ ({args.long_run:,} checkpoints)": f"/runs/{long_run}/",
        "/audit/": "/audit/",
        "/audit/ reviewer-3's approvals in November": (
            "/audit/?actor=reviewer-3&decision=approve&since=2026-11-01&until=2026-11-30"
        ),
        "/audit/ verification failures last quarter": (
            "/audit/?status=verify_failed&since=2026-07-01&until=2026-09-30"
        ),
    }
    connections.close_all()  # The second process is forked from this one.
    with serving("serve") as base:
        alone = {name: timed(base, cookie, path, args.samples) for name, path in pages.items()}
        forked = multiprocessing.get_context("fork")
        loading, stop, done = forked.Event(), forked.Event(), forked.Queue()
        loader = forked.Process(
            target=load,
            args=(base, cookie, list(pages.values()), args.load, (loading, stop), done),
        )
        loader.start()
        loading.wait(timeout=30)
        loaded = {name: timed(base, cookie, path, args.samples) for name, path in pages.items()}
        stop.set()
        answered, seconds = done.get(timeout=60)
        loader.join()
    print(
        f"{args.checkpoints:,} checkpoints, {args.runs:,} runs, {args.pending:,} pending; "
        f"{args.samples} loads of each page, ms to the whole answer (goal: p95 under "
        f"{GOAL_P95_MS} ms)"
    )
    print(f"{'page':<48} {'alone p50/p95/p99':>22} {'under load p50/p95/p99':>26}")
    for name in pages:
        cells = []
        for when, times in (("alone", alone[name]), ("under load", loaded[name])):
            p50, p95, p99 = (
                figures.add(f"{name} {when}: p{p}", percentile(times, p), "ms")
                for p in (50, 95, 99)
            )
            cells.append(f"{p50:6.1f} {p95:6.1f} {p99:6.1f}")
        print(f"{name:<48} {cells[0]:>22} {cells[1]:>26}")
    rate = figures.add("second process: pages answered", answered / seconds, "pages/s")
    print(f"second process: {answered} pages in {seconds:.1f} s, {rate:.1f} pages/s")
    figures.write()


if __name__ == "__main__":
    main()
