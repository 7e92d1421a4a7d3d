"""A rolling upgrade, with the previous release's real code (tests/previous_release.py):
its workers carry out what this version proposed and approved, beside this version's
workers, each effect once; and this version's worker carries out what that release
approved before the upgrade. Every chain verifies and every invariant holds after."""

import signal
import subprocess
import sys
from decimal import Decimal
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from runs.chain import verify_all_chains
from runs.models import Account, Checkpoint, Operation, WorkerHeartbeat
from tests import previous_release
from tests.conftest import http_arguments
from tests.first_migration import empty_database
from tests.helpers import decide_on
from tests.processes import ROOT, child_env, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]


@pytest.fixture(scope="session")
def release(tmp_path_factory) -> Path:
    return previous_release.unpack(tmp_path_factory.mktemp(f"oversight-{previous_release.VERSION}"))


def started(code: Path, *args: str, **env: str) -> subprocess.Popen:
    """``manage.py ARGS`` of the code in ``code`` (a release's, or this checkout's),
    against this test run's database."""
    return subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=code,
        env={**child_env(), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def ran(code: Path, *args: str) -> str:
    process = started(code, *args)
    out, err = process.communicate(timeout=240)
    assert process.returncode == 0, f"{code.name}: manage.py {' '.join(args)}: {err[-3000:]}"
    return out


def all_is_well() -> None:
    said = StringIO()
    call_command("check_invariants", stdout=said)
    assert "all invariants hold" in said.getvalue()
    assert all(report.ok for report in verify_all_chains()), verify_all_chains()


def test_the_previous_release_s_worker_carries_out_what_this_version_approved(
    approved, accounts, target, release
):
    file, ledger, http = approved("file"), approved("ledger"), approved("http")

    ran(release, "runworker", "--once", "--name", f"worker-{previous_release.VERSION}")

    ended = Operation.objects.filter(pk__in=[file.pk, ledger.pk, http.pk])
    assert sorted(ended.values_list("status", flat=True)) == ["committed"] * 3
    assert Account.objects.get(name="A").balance == Decimal("4900.00")
    assert target.applied[http.idempotency_key] == 1
    assert WorkerHeartbeat.objects.filter(name=f"worker-{previous_release.VERSION}").exists()
    all_is_well()


def test_a_worker_of_each_version_side_by_side_send_each_effect_once(
    propose, reviewer, target, release
):
    """Both workers wait for work when the approvals come; each effect takes two
    seconds (the target's ``/slow/``) and this version's worker may carry out two at a
    time, so both take their share. The target counts every request it receives."""
    workers = {
        "old": started(release, "runworker", "--name", "old"),
        "new": started(ROOT, "runworker", "--name", "new", OVERSIGHT_WORKER_EFFECTS="2"),
    }
    try:
        wait_until(
            lambda: WorkerHeartbeat.objects.filter(name__in=workers).count() == 2,
            60,
            "both workers up",
        )
        operations = [proposed_http(propose, target, n) for n in range(8)]
        for operation in operations:
            decide_on(operation, reviewer)
        wait_until(
            lambda: (
                not Operation.objects.filter(pk__in=[op.pk for op in operations])
                .exclude(status="committed")
                .exists()
            ),
            120,
            "every operation committed",
        )
    finally:
        for worker in workers.values():
            worker.send_signal(signal.SIGTERM)
    for worker in workers.values():
        _, err = worker.communicate(timeout=60)
        assert worker.returncode == 0, err[-3000:]

    assert [target.received[op.idempotency_key] for op in operations] == [1] * 8
    committers = Checkpoint.objects.filter(
        operation__in=operations, event="operation.status", to_status="in_flight"
    ).values_list("actor_label", flat=True)
    assert set(committers) == set(workers), list(committers)
    all_is_well()


def proposed_http(propose, target, n: int) -> Operation:
    arguments = http_arguments(target.base, "slow")
    arguments["url"] = f"{target.base}/slow/items/{n}"
    arguments["verify"]["url"] = f"{target.base}/items/{n}"
    return propose(
        f"call-{n}", action="http.request", arguments=arguments, rollback_kind="out_of_band"
    )


def test_the_previous_release_s_web_writes_into_this_schema_or_the_docs_say_stop(release):
    """Its demo writes what its web processes write for agents and reviewers: projects,
    runs, messages, operations, decisions and requests of every kind."""
    process = started(release, "seed_demo")
    _, err = process.communicate(timeout=240)
    if previous_release.WEB_STOP:
        assert process.returncode != 0
        assert "IntegrityError" in err and previous_release.WEB_STOP in err
    else:
        assert process.returncode == 0, err[-3000:]
        all_is_well()


def test_this_version_s_worker_carries_out_what_the_previous_release_approved(release):
    empty_database()
    ran(release, "migrate", "--verbosity", "0")
    ran(release, "seed_demo")
    approved = Operation.objects.filter(status="approved", executor=Operation.Executor.SERVER)
    waiting = set(approved.values_list("pk", flat=True))
    assert waiting, f"{previous_release.VERSION}'s demo approved nothing to carry out"

    ran(ROOT, "migrate", "--verbosity", "0")
    ran(ROOT, "runworker", "--once")

    ended = dict(Operation.objects.filter(pk__in=waiting).values_list("pk", "status"))
    assert set(ended.values()) == {"committed"}, ended
    assert Checkpoint.objects.filter(operation__in=waiting, to_status="committed").count() == len(
        waiting
    )
    all_is_well()
