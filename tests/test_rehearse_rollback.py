"""``manage.py rehearse_rollback``: the pre-deploy rehearsal of every rollback path, run
as an operator runs it, in a child process against this test run's database (which it
must leave alone: it works in a throwaway database of its own)."""

import subprocess
import sys
from pathlib import Path

import pytest
from django.apps import apps

from runs.models import Account, Operation, Project
from runs.rehearsal import RehearsalRefused, rehearse
from tests.processes import ROOT, child_env, manage

OUTCOMES = {
    "commit": "committed",
    "in-band": "rolled_back",
    "compensating": "compensated",
    "out-of-band": "alerted",
}


def report(stdout: str) -> dict[tuple[str, str], tuple[str, str]]:
    """The report's checks: (scenario, check) -> (verdict, detail)."""
    lines = [line.split(None, 3) for line in stdout.splitlines()]
    return {
        (scenario, check): (verdict, detail)
        for verdict, scenario, check, detail in (line for line in lines if len(line) == 4)
        if verdict in ("PASS", "FAIL")
    }


def failed(stdout: str) -> list[tuple[str, str]]:
    return [key for key, (verdict, _) in report(stdout).items() if verdict == "FAIL"]


def row_counts() -> dict[str, int]:
    return {model._meta.label: model.objects.count() for model in apps.get_models()}


@pytest.mark.django_db(transaction=True)
def test_rehearsal_passes_every_rollback_path_without_touching_the_real_database(settings):
    before = row_counts()

    result = manage("rehearse_rollback")

    assert result.returncode == 0, result.stdout + result.stderr
    checks = report(result.stdout)
    assert failed(result.stdout) == []
    for scenario, status in OUTCOMES.items():
        verdict, detail = checks[scenario, "outcome"]
        assert verdict == "PASS" and detail.startswith(f"{status}:")
        assert checks[scenario, "checkpoints"][1].endswith("chain intact")
    assert checks["in-band", "effect"][0] == checks["compensating", "effect"][0] == "PASS"
    assert checks["out-of-band", "alert"][0] == checks["out-of-band", "delivery"][0] == "PASS"
    assert "rehearsal passed: 14 checks" in result.stdout
    throwaway = result.stdout.splitlines()[0].rsplit(": ", 1)[1]
    assert not Path(throwaway).exists()
    assert row_counts() == before
    assert not settings.OVERSIGHT_WORKSPACE.exists()
    assert not settings.OVERSIGHT_ARTIFACT_ROOT.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("broken", ["in-band", "compensating"])
def test_rehearsal_fails_when_a_rollback_undoes_nothing(broken):
    result = subprocess.run(
        [sys.executable, "-m", "tests.rehearsal_child", broken],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 1, result.stdout + result.stderr
    assert failed(result.stdout) == [(broken, "effect")]
    assert result.stderr.strip().endswith(f"rehearsal failed: {broken} effect")


def test_rehearsal_runs_beside_other_projects_without_touching_them(propose, accounts):
    waiting = propose("still-deciding")
    balances = dict(Account.objects.values_list("name", "balance"))

    checks = rehearse()

    assert [str(check) for check in checks if not check.passed] == []
    waiting.refresh_from_db()
    assert waiting.status == Operation.Status.PROPOSED
    assert dict(Account.objects.filter(project=waiting.project).values_list("name", "balance")) == (
        balances
    )


def test_rehearsal_refuses_a_database_where_other_work_waits_for_a_worker(approved):
    op = approved("ledger")
    projects = Project.objects.count()

    with pytest.raises(RehearsalRefused, match="rehearse in a database of its own"):
        rehearse()

    op.refresh_from_db()
    assert op.status == Operation.Status.APPROVED
    assert Project.objects.count() == projects
