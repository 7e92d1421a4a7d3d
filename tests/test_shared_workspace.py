"""``file.write`` on more than one machine (#39 item 2): every worker must see the same
workspace. A worker whose workspace is another folder (a machine without the shared
volume) claims no ``file.write``, says why in its log and on ``/healthz``, and goes on
with everything else; the workers that see the shared one write the files. Two
machines are two workers here, each stepping with its own ``OVERSIGHT_WORKSPACE``."""

import logging
from contextlib import contextmanager
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from runs.canonical import sha256_hex
from runs.engine.worker import Worker
from runs.models import Operation, SharedWorkspace, WorkerHeartbeat
from runs.shared_workspace import MARK
from tests.helpers import drained

pytestmark = pytest.mark.django_db
PATH = "notes/today.md"


@pytest.fixture
def shared(settings):
    return settings.OVERSIGHT_WORKSPACE


@pytest.fixture
def elsewhere(settings, tmp_path):
    """How a machine without the shared volume works: its own, empty folder."""

    @contextmanager
    def on_that_machine():
        mounted = settings.OVERSIGHT_WORKSPACE
        settings.OVERSIGHT_WORKSPACE = tmp_path / "local-disk"
        try:
            yield
        finally:
            settings.OVERSIGHT_WORKSPACE = mounted

    return on_that_machine


def written(root, project) -> bool:
    return (root / f"project-{project.pk}" / PATH).exists()


def test_a_worker_without_the_shared_workspace_writes_no_file_and_says_why(
    approved, project, shared, elsewhere, client, caplog, tmp_path
):
    Worker("host-a").housekeeping()  # The first worker marks and records its workspace.
    write = approved("file")
    transfer = approved("ledger")

    with elsewhere(), caplog.at_level(logging.WARNING, logger="runs.engine.worker"):
        Worker("host-b").drain()

    write.refresh_from_db()
    transfer.refresh_from_db()
    assert (write.status, transfer.status) == ("approved", "committed")
    assert not written(tmp_path / "local-disk", project)
    refused = WorkerHeartbeat.objects.get(name="host-b").workspace_refused
    assert refused.startswith(f"file.write refused: the workspace {tmp_path / 'local-disk'} ")
    assert "has no mark; the shared one" in refused
    assert f"worker host-b: {refused}" in caplog.text
    health = client.get("/healthz").json()
    assert health["status"] == "degraded"
    assert health["checks"]["workspace"] == {
        "ok": False,
        "workers_refusing_file_write": 1,
        "no_worker_writes": False,
    }

    assert drained(write).status == "committed"  # By host-a, which sees the shared one.

    assert written(shared, project)


def test_a_write_whose_workspace_lost_its_mark_does_not_fire(approved, project, shared):
    Worker("host-a").housekeeping()
    (shared / MARK).unlink()  # The volume came unmounted: an empty folder underneath.
    write = approved("file")

    Worker("host-a").drain()

    write.refresh_from_db()
    assert write.status == Operation.Status.APPROVED
    assert write.attempts == 0  # Not even claimed: the heartbeat saw it first.
    assert not written(shared, project)


def test_a_write_taken_up_after_the_volume_went_is_handed_back_uncounted(approved, project, shared):
    worker = Worker("host-a")
    worker.housekeeping()
    write = approved("file")
    mark = (shared / MARK).read_text()
    (shared / MARK).write_text("")  # Its last heartbeat said the workspace was shared.

    worker.drain()

    write.refresh_from_db()
    assert (write.status, write.intent, write.attempts) == ("in_flight", None, 0)
    assert write.checkpoints.order_by("-seq").first().event == "operation.handed_back"
    assert worker.workspace_refused.startswith("file.write refused: the workspace ")
    assert not written(shared, project)
    worker.drain()  # It claims no file.write any more.
    assert write.checkpoints.filter(event="operation.handed_back").count() == 1
    (shared / MARK).write_text(mark)

    assert drained(write).status == "committed"  # By another worker, at once.
    assert written(shared, project)


def test_an_upgraded_installation_s_first_worker_takes_no_folder_for_the_shared_one(
    approved, project, shared, elsewhere, client
):
    earlier = drained(approved("file"))  # Written before this release: no mark recorded.
    assert earlier.status == "committed"
    SharedWorkspace.objects.all().delete()
    WorkerHeartbeat.objects.all().delete()
    (shared / MARK).unlink()
    write = approved("file", path="notes/later.md", expected_sha256=None)

    with elsewhere():
        drained(write)

    assert write.status == "approved"
    refused = WorkerHeartbeat.objects.get().workspace_refused
    assert "no shared workspace is recorded yet" in refused
    assert "run manage.py adopt_workspace where the shared one is mounted" in refused
    assert client.get("/healthz").json()["status"] == "unhealthy"  # No worker writes.
    WorkerHeartbeat.objects.all().delete()

    assert drained(write).status == "committed"  # Here: this folder holds the files.
    assert SharedWorkspace.objects.get().mark == (shared / MARK).read_text()


def test_two_workers_on_one_shared_volume_agree_on_its_mark(shared):
    Worker("host-a").housekeeping()
    Worker("host-b").housekeeping()

    mark = (shared / MARK).read_text()
    assert SharedWorkspace.objects.get().mark == mark
    assert set(WorkerHeartbeat.objects.values_list("workspace_refused", flat=True)) == {""}


def test_adopting_another_workspace_moves_file_write_there(
    approved, project, elsewhere, admin_user, django_user_model, tmp_path
):
    Worker("host-a").housekeeping()
    with pytest.raises(CommandError, match="admin is not a superuser: only one may adopt"):
        call_command("adopt_workspace", "--as", admin_user.username)
    root = django_user_model.objects.create_superuser("root", "root@example.com", "x")
    write = approved("file", expected_sha256=None)

    with elsewhere():
        out = StringIO()
        call_command("adopt_workspace", "--as", root.username, stdout=out)
        assert out.getvalue().startswith(f"{tmp_path / 'local-disk'} is the shared workspace")
        op = drained(write)

    assert op.status == "committed"
    assert op.result["output"]["sha256"] == sha256_hex(b"hello\n")
    assert written(tmp_path / "local-disk", project)
