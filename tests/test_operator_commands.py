"""The operator's command line (#37, item 6), for when the web is down or for scripts:
list and inspect runs and alerts, cancel a run, resolve an alert, each change made as
a named user through the page's own service and rules, and recorded with their name."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from runs.models import Alert, Checkpoint, Operation, Run
from runs.services.alerts import raise_alert
from runs.transitions import transition_operation
from tests.conftest import AGENT
from tests.helpers import decide_on
from tests.processes import manage


def said(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def lines(*args) -> list[dict]:
    return [json.loads(line) for line in said(*args, "--json").splitlines()]


@pytest.fixture
def alerted(propose, reviewer) -> Alert:
    """An operation whose verification failed: an alert halts its run."""
    operation = propose("call-1")
    decide_on(operation, reviewer)
    for status in (Operation.Status.IN_FLIGHT, Operation.Status.VERIFY_FAILED):
        transition_operation(operation=operation, to=status, actor=AGENT)
    return raise_alert(operation=operation, actor=AGENT, summary="Verify failed", state_left={})


def test_runs_are_listed_for_people_and_for_scripts(run, other_project, session):
    header, first = said("list_runs").splitlines()
    (row,) = lines("list_runs", "--project", "acme")

    assert header.split() == ["RUN", "PROJECT", "STATUS", "REASON", "CREATED_AT", "GOAL"]
    assert first.split()[:3] == [str(run.pk), "acme", "running"]
    assert first.endswith("Pay the supplier invoice")
    assert (row["run"], row["status"], row["goal"]) == (run.pk, run.status, run.goal)
    assert lines("list_runs", "--project", "other") == []
    assert lines("list_runs", "--status", "cancelled") == []


def test_operations_are_listed_by_status(propose, reviewer):
    approved, waiting = propose("call-1"), propose("call-2")
    decide_on(approved, reviewer)

    only_approved = lines("list_operations", "--status", "approved")
    both = lines("list_operations", "--status", "approved", "--status", "proposed")

    assert [row["operation"] for row in only_approved] == [approved.pk]
    assert [row["operation"] for row in both] == [waiting.pk, approved.pk]
    assert lines("list_operations", "--project", "other") == []


def test_a_run_is_shown_with_its_operations_and_alerts(alerted):
    (shown,) = lines("show_run", str(alerted.run_id))

    assert shown["status"] == Run.Status.WAITING
    assert [(op["pk"], op["status"]) for op in shown["operations"]] == [
        (alerted.operation_id, Operation.Status.ALERTED)
    ]
    assert [alert["pk"] for alert in shown["alerts"]] == [alerted.pk]
    assert "Verify failed" in said("show_run", str(alerted.run_id))


def test_alerts_not_yet_resolved_are_listed(alerted, admin_user):
    assert [row["alert"] for row in lines("list_alerts")] == [alerted.pk]

    said("resolve_alert", str(alerted.pk), "--note", "Checked the ledger by hand", "--as", "admin")

    assert lines("list_alerts") == []
    assert [row["status"] for row in lines("list_alerts", "--all")] == ["resolved"]


def test_an_admin_cancels_a_run_from_the_command_line_and_is_named(run, propose, admin_user):
    waiting = propose("call-1")

    out = said("cancel_run", str(run.pk), "--reason", "Web is down; stop it", "--as", "admin")

    assert out.strip() == f"run {run.pk} cancelled by admin"
    run.refresh_from_db()
    waiting.refresh_from_db()
    assert (run.status, waiting.status) == (Run.Status.CANCELLED, Operation.Status.CANCELLED)
    last = Checkpoint.objects.filter(run=run).latest("seq")
    assert (last.actor_kind, last.actor_label) == ("user", "admin")


def test_an_alert_resolved_from_the_command_line_names_its_resolver(alerted, admin_user):
    said("resolve_alert", str(alerted.pk), "--note", "Checked the ledger by hand", "--as", "admin")

    alerted.refresh_from_db()
    assert (alerted.status, alerted.resolved_by, alerted.resolution_note) == (
        Alert.Status.RESOLVED,
        admin_user,
        "Checked the ledger by hand",
    )
    with pytest.raises(CommandError):  # once only
        said("resolve_alert", str(alerted.pk), "--note", "again", "--as", "admin")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["cancel_run", "RUN", "--reason", "stop", "--as", "auditor"], "may not cancel run"),
        (["cancel_run", "RUN", "--reason", "stop", "--as", "outsider"], "may not cancel run"),
        (["cancel_run", "RUN", "--reason", " ", "--as", "admin"], "say why the run is cancelled"),
        (["cancel_run", "99999", "--reason", "stop", "--as", "admin"], "no run 99999"),
        (["cancel_run", "RUN", "--reason", "stop", "--as", "nobody"], "no active user named"),
        (["resolve_alert", "99999", "--note", "n", "--as", "admin"], "no alert 99999"),
    ],
)
def test_a_change_not_allowed_changes_nothing_and_says_why(
    run, admin_user, auditor, outsider, args, words
):
    with pytest.raises(CommandError, match=words):
        said(*[str(run.pk) if arg == "RUN" else arg for arg in args])

    run.refresh_from_db()
    assert run.status != Run.Status.CANCELLED


@pytest.mark.django_db(transaction=True)  # the command runs in a process of its own
def test_a_mistake_is_one_line_and_exit_status_1():
    done = manage("cancel_run", "12", "--reason", "stop", "--as", "nobody")

    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == ["CommandError: no active user named 'nobody'"]
