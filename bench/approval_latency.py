"""How long an approval takes to be carried out by an idle worker: from the reviewer's
decision (the service a click calls) to the operation committed in the database. One
``runworker`` process (its default idle interval) works on a throwaway SQLite file, or
DATABASE_URL's database (into which it writes a bench project; the worker carries out
any approved operation it finds there, so give it a database of its own). Before each decision
the bench waits a random while, so that the worker is idle at a random point of its
interval, as it would be for a person's click.

    .venv/bin/python bench/approval_latency.py [--samples 50]
"""

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OVERSIGHT_VAR_DIR", tempfile.mkdtemp(prefix="oversight-bench-"))
os.environ.setdefault("OVERSIGHT_SECRET_KEY", "bench-only-secret-key-0123456789abcdef")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "oversight.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from bench.report import Figures, add_json_option  # noqa: E402
from runs.actors import Actor  # noqa: E402
from runs.models import Account, Operation, Project, Role, WorkerHeartbeat  # noqa: E402
from runs.permissions import role_group  # noqa: E402
from runs.services.decisions import decide  # noqa: E402
from runs.services.proposals import propose_operation  # noqa: E402
from runs.services.runs import open_session, start_run  # noqa: E402

AGENT = Actor.agent("bench")
GOAL_MS = 100


def prepare():
    suffix = str(time.time_ns())
    project = Project.objects.create(slug=f"latency-{suffix}", name="Approval latency bench")
    project.policies.create(action="ledger.transfer", approvals_required=1)
    Account.objects.create(project=project, name="A", balance=Decimal(10_000))
    Account.objects.create(project=project, name="B", balance=0)
    users = get_user_model().objects
    owner, reviewer = users.create_user(f"owner-{suffix}"), users.create_user(f"rev-{suffix}")
    project.memberships.create(user=reviewer, role=role_group(Role.REVIEWER))
    return open_session(project=project, owner=owner, agent="bench"), reviewer


def proposed(session, n: int) -> Operation:
    run = start_run(session=session, goal=f"transfer {n}", actor=AGENT)
    return propose_operation(
        run=run,
        call_id="t",
        action="ledger.transfer",
        arguments={"from": "A", "to": "B", "amount": "1.00"},
        risk="low",
        rollback_kind="compensating",
        base_version=run.version,
        actor=AGENT,
    )


def approved_to_committed(operation: Operation, reviewer) -> float:
    """Seconds from the decision to the operation committed."""
    started = time.perf_counter()
    decide(
        operation=operation,
        reviewer=reviewer,
        kind="approve",
        arguments_hash=operation.arguments_hash,
    )
    committed = Operation.objects.filter(pk=operation.pk, status=Operation.Status.COMMITTED)
    while not committed.exists():
        if time.perf_counter() - started > 30:
            raise SystemExit(f"operation {operation.pk} was not carried out within 30 s")
        time.sleep(0.001)
    return time.perf_counter() - started


def percentile(values: list[float], p: int) -> float:
    """The smallest value with at least ``p`` percent of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(0, -(-len(ordered) * p // 100) - 1)]


def main() -> None:
    parser = add_json_option(argparse.ArgumentParser())
    parser.add_argument("--samples", type=int, default=50)
    args = parser.parse_args()
    figures = Figures(__file__, args)
    call_command("migrate", verbosity=0)
    print(f"database: {connection.vendor} {connection.settings_dict['NAME']}")
    session, reviewer = prepare()
    name = f"latency-{os.getpid()}"
    worker = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "runworker", "--name", name], cwd=ROOT
    )
    try:
        while not WorkerHeartbeat.objects.filter(name=name).exists():
            if worker.poll() is not None:
                raise SystemExit("the worker exited")
            time.sleep(0.05)
        samples = []
        for n in range(args.samples):
            operation = proposed(session, n)
            time.sleep(random.uniform(0.3, 0.8))  # The worker looked, and idles.
            samples.append(approved_to_committed(operation, reviewer) * 1000)
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            raise
    median = figures.add("approval to commit: median", statistics.median(samples), "ms")
    p95 = figures.add("approval to commit: p95", percentile(samples, 95), "ms")
    worst = figures.add("approval to commit: max", max(samples), "ms")
    figures.add("approvals", len(samples), "approvals")
    figures.add("goal: median under", GOAL_MS, "ms")
    print(
        f"approval to commit, idle worker: median {median:.1f} ms, p95 {p95:.1f} ms, "
        f"max {worst:.1f} ms over {len(samples)} approvals (goal: a median under {GOAL_MS} ms)"
    )
    figures.write()


if __name__ == "__main__":
    main()
