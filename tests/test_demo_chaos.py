"""The demo under chaos: the scripted agent keeps proposing, reviewers keep approving,
workers are killed with SIGKILL at random and restarted — and afterwards every
invariant holds and no effect fired twice."""

import random
import signal
import subprocess
from collections import Counter
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db.models import Max

from runs.errors import OversightError
from runs.models import Decision, Operation, Project
from runs.services.decisions import decide
from runs.services.tokens import issue_token
from tests.processes import (
    Output,
    leases_lapsed,
    listening_port,
    manage,
    manage_started,
)

pytestmark = pytest.mark.django_db(transaction=True)

# Generous: the machine is shared; a deadline only bounds how long a failure takes.
DEADLINE = 60
# The one refusal the reviewers' loop provokes: the second reviewer of an operation that
# the first one's approval already approved. Any other refusal is a bug the chaos found.
NO_LONGER_AWAITS = ("decision_refused", "it no longer awaits a decision")


def logged(log: Path, *args: str, output=None, **env: str) -> subprocess.Popen:
    """``manage.py ARGS`` in the background, its error output (and its output, unless
    ``output`` says where) appended to ``log``: a pipe nobody reads while the process
    runs would fill up with its log lines and stop it."""
    with log.open("a") as file:
        return manage_started(*args, stdout=output or file, stderr=file, **env)


def tail(log: Path) -> str:
    return log.read_text()[-3000:]


def api_server(log: Path) -> tuple[subprocess.Popen, str]:
    """Start Oversight's HTTP API on a port the kernel picks when it binds (so no other
    process can take it first) and return its URL, read from what the server says once
    it listens."""
    server = logged(log, "runserver", "--noreload", "127.0.0.1:0", output=subprocess.PIPE)
    return server, f"http://127.0.0.1:{listening_port(Output(server.stdout), server)}"


def worker(log: Path) -> subprocess.Popen:
    return logged(log, "runworker", "--lease-seconds", "2", "--idle-seconds", "0.1")


def runs_on(process: subprocess.Popen, seconds: float) -> bool:
    """Whether ``process`` still runs ``seconds`` from now (the pace of the chaos; it
    returns as soon as the process exits)."""
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return True
    return False


def approve_everything_pending(reviewers) -> Counter:
    """Each reviewer approves each proposal in turn; returns the refusals, counted by
    error code and reason (the operation's number left out)."""
    refusals = Counter()
    for op in Operation.objects.filter(status="proposed").select_related("project"):
        for reviewer in reviewers:
            try:
                decide(
                    operation=op,
                    reviewer=reviewer,
                    kind="approve",
                    arguments_hash=op.arguments_hash,
                )
            except OversightError as refused:
                refusals[refused.code, str(refused).rpartition("; ")[2]] += 1
    return refusals


@pytest.fixture
def children():
    """The processes the test starts: any still running at its end (an assertion failed
    midway) is killed, so that none outlives it."""
    started = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_invariants_hold_after_workers_die_at_random(
    target, monkeypatch, django_user_model, tmp_path, children
):
    monkeypatch.setenv("OVERSIGHT_DEMO_PASSWORD", "chaos-demo-password")
    call_command("seed_demo", stdout=StringIO())
    first, second = django_user_model.objects.filter(
        username__in=["reviewer", "reviewer2"]
    ).order_by("username")
    seeded = Decision.objects.aggregate(last=Max("pk"))["last"] or 0
    chance = random.Random(2026)
    api, api_url = api_server(tmp_path / "api.log")
    agent_owner = django_user_model.objects.get(username="agent-owner")
    _, token = issue_token(
        project=Project.objects.get(slug="demo"),
        name="chaos",
        issued_by=agent_owner,
        owner_username="agent-owner",
    )
    agent_log = tmp_path / "agent.log"
    agent = logged(
        agent_log,
        "demo_agent",
        "--api",
        api_url,
        "--target",
        target.base,
        "--interval",
        "0.2",
        "--ticks",
        "45",
        OVERSIGHT_AGENT_TOKEN=token,
    )
    logs = [tmp_path / "worker-0.log", tmp_path / "worker-1.log"]
    workers = [worker(log) for log in logs]
    children += [api, agent, *workers]
    kills, refusals = 0, Counter()
    while runs_on(agent, 0.3):
        refusals += approve_everything_pending([first, second])
        if chance.random() < 0.3:
            victim = chance.randrange(len(workers))
            workers[victim].send_signal(signal.SIGKILL)
            workers[victim].wait()
            workers[victim] = worker(logs[victim])
            children.append(workers[victim])
            kills += 1
    assert agent.returncode == 0, tail(agent_log)
    api.terminate()
    api.wait(timeout=DEADLINE)
    refusals += approve_everything_pending([first, second])
    for process in workers:
        process.send_signal(signal.SIGKILL)
        process.wait()
    leases_lapsed()
    last = manage("runworker", "--once")
    assert last.returncode == 0, last.stderr

    assert kills >= 3
    # The second reviewer is refused exactly where the first one's approval was the last
    # one an operation needed; any other refusal is counted too, and fails the test.
    decided = Decision.objects.filter(pk__gt=seeded)
    settled_by_first = (
        Operation.objects.filter(decisions__in=decided.filter(reviewer=first))
        .exclude(decisions__in=decided.filter(reviewer=second))
        .distinct()
    )
    assert settled_by_first.exists()
    assert refusals == Counter({NO_LONGER_AWAITS: settled_by_first.count()})
    statuses = set(Operation.objects.values_list("status", flat=True))
    assert {"committed", "compensated", "precondition_failed", "alerted"} <= statuses
    assert not Operation.objects.filter(status__in=["in_flight", "verify_failed"]).exists()
    for op in Operation.objects.filter(action="http.request", status="committed"):
        assert target.applied[op.idempotency_key] == 1
    checked = manage("check_invariants")
    assert checked.returncode == 0, checked.stderr
    assert "all invariants hold" in checked.stdout
