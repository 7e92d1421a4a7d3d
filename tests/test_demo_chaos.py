"""The demo under chaos: the scripted agent keeps proposing, reviewers keep approving,
workers are killed with SIGKILL at random and restarted — and afterwards every
invariant holds and no effect fired twice."""

import contextlib
import random
import signal
import subprocess
import sys
import time
from io import StringIO

import pytest
from django.core.management import call_command

from runs.errors import OversightError
from runs.models import Operation, Project
from runs.services.decisions import decide
from runs.services.tokens import issue_token
from tests.processes import ROOT, child_env, free_port, manage

pytestmark = pytest.mark.django_db(transaction=True)


def start(*args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**child_env(), **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def api_url(server: subprocess.Popen) -> str:
    return f"http://{server.args[-1]}"


def worker() -> subprocess.Popen:
    return start("runworker", "--lease-seconds", "2", "--idle-seconds", "0.1")


def approve_everything_pending(reviewers) -> None:
    for op in Operation.objects.filter(status="proposed").select_related("project"):
        for reviewer in reviewers:
            # Refused when this reviewer already approved, or someone decided meanwhile.
            with contextlib.suppress(OversightError):
                decide(
                    operation=op,
                    reviewer=reviewer,
                    kind="approve",
                    arguments_hash=op.arguments_hash,
                )


def test_invariants_hold_after_workers_die_at_random(target, monkeypatch, django_user_model):
    monkeypatch.setenv("OVERSIGHT_DEMO_PASSWORD", "chaos-demo-password")
    call_command("seed_demo", stdout=StringIO())
    reviewers = list(django_user_model.objects.filter(username__in=["reviewer", "reviewer2"]))
    chance = random.Random(2026)
    api = start("runserver", "--noreload", f"127.0.0.1:{free_port()}")
    _, token = issue_token(
        project=Project.objects.get(slug="demo"), name="chaos", owner_username="agent-owner"
    )
    agent = start(
        "demo_agent",
        "--api",
        api_url(api),
        "--target",
        target.base,
        "--interval",
        "0.2",
        "--ticks",
        "45",
        OVERSIGHT_AGENT_TOKEN=token,
    )
    workers = [worker(), worker()]
    kills = 0
    while agent.poll() is None:
        approve_everything_pending(reviewers)
        if chance.random() < 0.3:
            victim = chance.randrange(len(workers))
            workers[victim].send_signal(signal.SIGKILL)
            workers[victim].wait()
            workers[victim] = worker()
            kills += 1
        time.sleep(0.3)
    assert agent.returncode == 0, agent.stderr.read()
    api.terminate()
    api.wait()
    approve_everything_pending(reviewers)
    for process in workers:
        process.send_signal(signal.SIGKILL)
        process.wait()
    time.sleep(2.2)  # Leases of the killed workers run out; one last worker finishes.
    assert manage("runworker", "--once").returncode == 0

    assert kills >= 3
    statuses = set(Operation.objects.values_list("status", flat=True))
    assert {"committed", "compensated", "precondition_failed", "alerted"} <= statuses
    assert not Operation.objects.filter(status__in=["in_flight", "verify_failed"]).exists()
    for op in Operation.objects.filter(action="http.request", status="committed"):
        assert target.applied[op.idempotency_key] == 1
    checked = manage("check_invariants")
    assert checked.returncode == 0, checked.stderr
    assert "all invariants hold" in checked.stdout
