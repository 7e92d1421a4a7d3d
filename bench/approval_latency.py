"""How long an approval takes to be carried out by an idle worker: from the reviewer's
decision (the service a click calls) to the operation committed in the database, and
to the agent, long-polling the operation through the production server (``serve``)
as the client's ``wait`` does, reading it committed. One ``runworker`` process (its
default idle interval) works on a throwaway SQLite file, or DATABASE_URL's database
(into which it writes a bench project; the worker carries out any approved operation
it finds there, so give it a database of its own). Before each decision the bench
waits a random while, so that the worker is idle at a random point of its interval,
as it would be for a person's click.

    .venv/bin/python bench/approval_latency.py [--samples 50]
"""

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.environment import ROOT, start_django

start_django(production_http=True)

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from bench.report import Figures, add_json_option, percentile  # noqa: E402
from bench.server import serving  # noqa: E402
from runs.actors import Actor  # noqa: E402
from runs.models import Account, AgentToken, Operation, Project, Role, WorkerHeartbeat  # noqa: E402
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
    project.memberships.create(user=owner, role=role_group(Role.REVIEWER))
    token, plain = AgentToken.issue(project=project, name="bench", owner=owner)
    session = open_session(project=project, owner=owner, agent="bench", token=token)
    return session, reviewer, plain


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


def agent_sees_committed(base: str, plain: str, operation: Operation, seen: list) -> None:
    """Long-poll ``operation`` as the client's ``wait`` does, from its version, until
    it reads it committed; append when."""
    version = operation.version
    headers = {"Authorization": f"Bearer {plain}"}
    while True:
        url = f"{base}/api/v1/operations/{operation.pk}?wait=30&version={version}"
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers)) as answer:
            read = json.load(answer)
        if read["status"] == Operation.Status.COMMITTED:
            seen.append(time.perf_counter())
            return
        version = read["version"]


def approved_to_committed(operation: Operation, reviewer, base: str, plain: str) -> tuple:
    """Seconds from the decision to the operation committed, and to the agent's
    long-poll answering it committed."""
    seen: list[float] = []
    agent = threading.Thread(target=agent_sees_committed, args=(base, plain, operation, seen))
    agent.start()
    time.sleep(random.uniform(0.3, 0.8))  # The worker looked, and idles; the agent waits.
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
    at_commit = time.perf_counter() - started
    agent.join(timeout=30)
    if not seen:
        raise SystemExit(f"the agent did not read operation {operation.pk} committed")
    return at_commit, seen[0] - started


def main() -> None:
    parser = add_json_option(argparse.ArgumentParser())
    parser.add_argument("--samples", type=int, default=50)
    args = parser.parse_args()
    figures = Figures(__file__, args)
    call_command("migrate", verbosity=0)
    print(f"database: {connection.vendor} {connection.settings_dict['NAME']}")
    session, reviewer, plain = prepare()
    name = f"latency-{os.getpid()}"
    with serving("serve") as base:
        worker = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "runworker", "--name", name], cwd=ROOT
        )
        try:
            while not WorkerHeartbeat.objects.filter(name=name).exists():
                if worker.poll() is not None:
                    raise SystemExit("the worker exited")
                time.sleep(0.05)
            samples = [
                approved_to_committed(proposed(session, n), reviewer, base, plain)
                for n in range(args.samples)
            ]
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(timeout=60)
            except subprocess.TimeoutExpired:
                worker.kill()
                raise
    for where, column in (("commit", 0), ("the agent", 1)):
        values = [sample[column] * 1000 for sample in samples]
        median = figures.add(f"approval to {where}: median", statistics.median(values), "ms")
        p95 = figures.add(f"approval to {where}: p95", percentile(values, 95), "ms")
        worst = figures.add(f"approval to {where}: max", max(values), "ms")
        print(
            f"approval to {where}, idle worker: median {median:.1f} ms, p95 {p95:.1f} ms, "
            f"max {worst:.1f} ms"
        )
    figures.add("approvals", len(samples), "approvals")
    figures.add("goal: median under", GOAL_MS, "ms")
    print(f"over {len(samples)} approvals (goal: a median under {GOAL_MS} ms to the agent)")
    figures.write()


if __name__ == "__main__":
    main()
