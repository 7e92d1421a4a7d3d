"""An operator pauses the workers (every lane, or one) and resumes them (#37, item 6):
a real ``runworker`` claims nothing paused and carries it out once resumed; the commands
act as a named user, refuse in one line with exit status 1, and record each act in the
installation's chain; the overview and an operation's page show the pauses
(``/healthz`` and ``/metrics``: tests/test_health.py, tests/test_metrics.py)."""

import subprocess
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from runs.actors import Actor
from runs.clock import db_now
from runs.errors import InvalidInput, NotPermitted
from runs.models import AdminCheckpoint, Operation
from runs.models.workers import WorkerPause
from runs.services.pauses import pause_workers, resume_workers
from runs.transitions import transition_operation
from tests.conftest import AGENT
from tests.helpers import decide_on
from tests.processes import manage, manage_started, wait_until

LEDGER = "database"  # The lane of a transfer (an effect inside Oversight's database).


def said(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().strip()


@pytest.fixture
def superuser(db):
    return get_user_model().objects.create_superuser("root", "root@example.com", "pw")


@pytest.fixture
def worker():
    process = manage_started(
        "runworker", "--name=pauses", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    yield process
    process.terminate()
    assert process.wait(timeout=60) == 0


def status_of(operation: Operation) -> str:
    return Operation.objects.values_list("status", flat=True).get(pk=operation.pk)


def becomes(operation: Operation, status: str, worker) -> None:
    wait_until(lambda: status_of(operation) == status, message=f"{status}", process=worker)


def worker_went_round(propose, worker) -> None:
    """Two proposals past their decision deadline, the second made once the worker
    expired the first: a worker tries a claim between any two of its rounds of what is
    due, so it tried at least once after this was called."""
    for n in range(2):
        marker = propose(f"marker-{n}-{Operation.objects.count()}")
        Operation.objects.filter(pk=marker.pk).update(expires_at=db_now() - timedelta(seconds=1))
        becomes(marker, Operation.Status.EXPIRED, worker)


@pytest.mark.django_db(transaction=True)  # the worker is a process of its own
def test_nothing_runs_while_every_lane_is_paused_each_time_and_runs_once_resumed(
    propose, reviewer, accounts, superuser, worker
):
    root = Actor.of_user(superuser)
    for n in (1, 2):  # A second pause holds as the first did.
        pause_workers(actor=root, reason="Ledger maintenance")
        operation = propose(f"pay-{n}")
        decide_on(operation, reviewer)
        worker_went_round(propose, worker)
        assert status_of(operation) == Operation.Status.APPROVED

        resume_workers(actor=root)

        becomes(operation, Operation.Status.COMMITTED, worker)
    accounts["B"].refresh_from_db()
    assert accounts["B"].balance == 200


@pytest.mark.django_db(transaction=True)
def test_a_paused_lane_holds_its_operations_while_another_lanes_run(
    propose, reviewer, approved, admin_user, worker
):
    held = propose("pay-1")  # First in line: a worker would take it first.
    pause_workers(lane=LEDGER, actor=Actor.of_user(admin_user), reason="Ledger audit")
    decide_on(held, reviewer)
    other = approved("file")

    becomes(other, Operation.Status.COMMITTED, worker)
    assert (held.lane, status_of(held)) == (LEDGER, Operation.Status.APPROVED)

    resume_workers(lane=LEDGER, actor=Actor.of_user(admin_user))
    becomes(held, Operation.Status.COMMITTED, worker)


def test_each_pause_and_resume_is_recorded_naming_the_operator_and_verifies(
    propose, superuser, admin_user
):
    propose("pay-1")  # An operation of the admin's project in the lane.
    said("pause_workers", "--reason", "Restore drill", "--as", "root")
    said("pause_workers", "--lane", LEDGER, "--reason", "Ledger audit", "--as", "admin")
    listed = [line.split(maxsplit=2)[:2] for line in said("list_pauses").splitlines()[1:]]
    said("resume_workers", "--lane", LEDGER, "--as", "admin")
    said("resume_workers", "--as", "root")

    assert listed == [["-", "root"], [LEDGER, "admin"]]
    acts = AdminCheckpoint.objects.values_list("event", "actor_label", "detail")
    assert list(acts) == [
        ("workers.paused", "root", {"lane": "", "reason": "Restore drill"}),
        ("workers.paused", "admin", {"lane": LEDGER, "reason": "Ledger audit"}),
        (
            "workers.resumed",
            "admin",
            {"lane": LEDGER, "reason": "Ledger audit", "paused_by": "admin"},
        ),
        (
            "workers.resumed",
            "root",
            {"lane": "", "reason": "Restore drill", "paused_by": "root"},
        ),
    ]
    assert "4 admin checkpoints" in said("verify_audit_chain")
    assert not WorkerPause.objects.exists()


def test_a_restore_holds_every_worker_as_oversight_itself(db):
    pause_workers(actor=Actor.policy("restore"), reason="Restored from a backup; verify first")

    (pause,) = WorkerPause.objects.all()
    assert (pause.lane, pause.paused_by, pause.paused_by_label) == ("", None, "restore")
    with pytest.raises(InvalidInput, match="every lane is already paused"):
        pause_workers(actor=Actor.policy("restore"), reason="again")


@pytest.mark.django_db(transaction=True)  # each command runs in a process of its own
@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["pause_workers", "--reason", "r", "--as", "nobody"],
            "no active user named 'nobody'",
        ),
        (
            ["pause_workers", "--reason", "r", "--as", "admin"],
            "admin may not pause or resume every worker: a superuser may",
        ),
        (
            ["pause_workers", "--lane", LEDGER, "--reason", "r", "--as", "reviewer"],
            "reviewer may not pause or resume lane database: an admin of every project whose "
            "operations use it may, or a superuser",
        ),
        (
            ["pause_workers", "--lane", LEDGER, "--reason", "r", "--as", "outsider"],
            "outsider may not pause or resume lane database: an admin of every project whose "
            "operations use it may, or a superuser",
        ),
        (
            ["pause_workers", "--lane", LEDGER, "--reason", " ", "--as", "admin"],
            "reason: say why the workers are paused",
        ),
        (
            ["pause_workers", "--lane", LEDGER, "--reason", "r", "--as", "admin"],
            "lane database is already paused; resume it first",
        ),
        (
            [
                "pause_workers",
                "--lane",
                "http.request typo",
                "--reason",
                "r",
                "--as",
                "admin",
            ],
            "no operation uses lane 'http.request typo' (list_operations shows lanes)",
        ),
        (
            ["resume_workers", "--lane", "nowhere", "--as", "admin"],
            "lane nowhere is not paused (list_pauses shows what is)",
        ),
    ],
)
def test_a_refusal_is_one_line_and_exit_status_1_and_changes_nothing(
    propose, admin_user, reviewer, outsider, args, line
):
    propose("pay-1")
    pause_workers(lane=LEDGER, actor=Actor.of_user(admin_user), reason="Taken first")

    done = manage(*args)

    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [f"CommandError: {line}"]
    assert list(WorkerPause.objects.values_list("lane", flat=True)) == [LEDGER]
    assert AdminCheckpoint.objects.count() == 1


def test_what_a_superuser_paused_an_admin_may_not_resume(propose, superuser, admin_user):
    propose("pay-1")
    pause_workers(lane=LEDGER, actor=Actor.of_user(superuser), reason="Target under repair")

    with pytest.raises(NotPermitted, match="admin may not resume what root paused"):
        resume_workers(lane=LEDGER, actor=Actor.of_user(admin_user))
    assert WorkerPause.objects.filter(lane=LEDGER).exists()


def test_staff_see_who_paused_the_workers_and_why_on_the_overview(client, superuser, reviewer):
    pause_workers(actor=Actor.of_user(superuser), reason="Restore <drill>")

    client.force_login(superuser)
    shown = client.get("/").text
    client.force_login(reviewer)
    not_staff = client.get("/").text

    assert "Workers are paused by root: Restore &lt;drill&gt;" in shown
    assert "worker-pauses" not in not_staff


def test_an_approved_operation_says_which_pause_holds_it(client, propose, reviewer, admin_user):
    operation = propose("pay-1")
    decide_on(operation, reviewer)
    pause_workers(lane=LEDGER, actor=Actor.of_user(admin_user), reason="Ledger audit")

    client.force_login(reviewer)
    page = client.get(f"/operations/{operation.pk}/").text

    assert "Waiting: the lane database is paused by admin: Ledger audit." in page


def test_an_operation_to_take_over_says_which_pause_holds_it(client, propose, reviewer, superuser):
    """As after a restore: in flight, its lease lapsed; a worker would take it over and
    verify it first, once the workers are resumed."""
    operation = propose("pay-1")
    decide_on(operation, reviewer)
    transition_operation(
        operation=operation,
        to=Operation.Status.IN_FLIGHT,
        actor=AGENT,
        changes={"lease_expires_at": db_now() - timedelta(seconds=1)},
    )
    pause_workers(lane=WorkerPause.EVERY_LANE, actor=Actor.of_user(superuser), reason="Restored")

    client.force_login(reviewer)
    page = client.get(f"/operations/{operation.pk}/").text

    assert "the workers are paused by root: Restored. No worker takes it over" in page
