"""``manage.py backup`` and ``restore`` as an operator runs them (docs/operating/backups.md),
on the suite's backend (SQLite, or PostgreSQL where DATABASE_URL is set): one archive
holds the database and its artifacts; a restore checks all of it before touching
anything, and after it nothing fires until verified: the workers are held until an
admin resumes them, and every operation approved or in flight at backup time is
verified before it may fire (#37, item 2)."""

import hashlib
import io
import json
import signal
import stat
import subprocess
import sys
import tarfile
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.utils import timezone

from runs.actions.files import workspace_of
from runs.actors import Actor
from runs.models import Alert, Operation, Run, WorkerHeartbeat
from runs.models.workers import WorkerPause
from runs.services.artifacts import attach_artifact
from runs.services.runs import start_run
from runs.transitions import transition_operation
from tests.conftest import AGENT
from tests.helpers import blob, decide_on
from tests.processes import ROOT, child_env, manage, wait_for_line

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]
NOTE = b"the supplier's invoice, as the agent read it\n"


def backed_up(tmp_path: Path) -> Path:
    archive = tmp_path / "backups" / "oversight.tar"
    call_command("backup", str(archive), stdout=io.StringIO())
    return archive


def members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {member.name: tar.extractfile(member).read() for member in tar.getmembers()}


def repacked(archive: Path, change) -> None:
    """Write ``archive`` again with ``change(members)`` applied to its members."""
    found = members(archive)
    change(found)
    with tarfile.open(archive, "w") as tar:
        for name, content in found.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))


def restore(archive: Path, *options: str) -> subprocess.CompletedProcess:
    return manage("restore", str(archive), *options)


# --- What a backup holds ---------------------------------------------------------------


def test_a_backup_is_one_archive_with_the_database_and_its_artifacts(run, tmp_path):
    artifact = attach_artifact(run=run, name="invoice.txt", content=NOTE, actor=AGENT)

    archive = backed_up(tmp_path)

    found = members(archive)
    manifest = json.loads(found.pop("manifest.json"))
    database = "database.sqlite3" if manifest["backend"] == "sqlite" else "database.pgdump"
    assert set(found) == {database, f"artifacts/{artifact.sha256}"}
    assert found[f"artifacts/{artifact.sha256}"] == NOTE
    assert manifest["database"]["sha256"] == hashlib.sha256(found[database]).hexdigest()
    assert manifest["artifacts"] == [{"sha256": artifact.sha256, "size": len(NOTE)}]
    assert ["runs", "0001_initial"] in manifest["migrations"]
    assert (manifest["format"], manifest["format_version"]) == ("oversight-backup", 1)
    # It holds sessions, password hashes and every artifact: its owner's only.
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600


def test_a_backup_never_overwrites_a_file(tmp_path):
    archive = tmp_path / "taken.tar"
    archive.write_bytes(b"yesterday's backup")

    done = manage("backup", str(archive))

    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"CommandError: {archive} already exists; choose a new file"
    ]
    assert archive.read_bytes() == b"yesterday's backup"


def test_a_backup_whose_referenced_artifact_is_gone_fails_and_writes_nothing(run, tmp_path):
    artifact = attach_artifact(run=run, name="invoice.txt", content=NOTE, actor=AGENT)
    blob(artifact).unlink()
    archive = tmp_path / "backups" / "oversight.tar"

    done = manage("backup", str(archive))

    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith(
        f"CommandError: artifact {artifact.sha256} is referenced by a checkpoint"
    )
    assert not archive.exists()
    assert list(archive.parent.iterdir()) == []  # Nor a temporary file left beside it.


# --- A restore refuses, touching nothing -----------------------------------------------


def missing_artifact(found: dict) -> None:
    del found[next(name for name in found if name.startswith("artifacts/"))]


def altered_artifact(found: dict) -> None:
    name = next(name for name in found if name.startswith("artifacts/"))
    found[name] = found[name].replace(b"invoice", b"receipt")


def altered_database(found: dict) -> None:
    name = next(name for name in found if name.startswith("database."))
    data = bytearray(found[name])
    data[len(data) // 2] ^= 0xFF
    found[name] = bytes(data)


def from_a_newer_version(found: dict) -> None:
    manifest = json.loads(found["manifest.json"])
    manifest["migrations"].append(["runs", "9999_from_the_future"])
    found["manifest.json"] = json.dumps(manifest).encode()


def sha_of_artifact(archive: Path) -> str:
    return json.loads(members(archive)["manifest.json"])["artifacts"][0]["sha256"]


@pytest.mark.parametrize(
    ("spoil", "says"),
    [
        (missing_artifact, "{archive} lacks artifact {sha}, which its manifest lists"),
        (
            altered_artifact,
            "{archive}: artifact {sha} does not have its sha256: altered or damaged",
        ),
        (
            altered_database,
            "{archive}: the database part does not have the sha256 its manifest gives: "
            "altered or damaged",
        ),
        (
            from_a_newer_version,
            "{archive} was made by a newer version (with migration runs.9999_from_the_future): "
            "restore it with that version",
        ),
    ],
)
def test_restore_refuses_a_spoilt_archive_in_one_line_and_touches_nothing(
    run, tmp_path, settings, spoil, says
):
    attach_artifact(run=run, name="invoice.txt", content=NOTE, actor=AGENT)
    archive = backed_up(tmp_path)
    sha = sha_of_artifact(archive)
    repacked(archive, spoil)
    settings.OVERSIGHT_ARTIFACT_ROOT = tmp_path / "fresh" / "artifacts"
    later = start_run(session=run.session, goal="written after the backup", actor=AGENT)

    done = restore(archive)

    assert done.returncode == 1
    assert done.stderr.splitlines() == ["CommandError: " + says.format(archive=archive, sha=sha)]
    assert done.stdout == ""
    assert Run.objects.filter(pk=later.pk).exists()
    assert not (tmp_path / "fresh").exists()
    assert not WorkerPause.objects.exists()


def test_restore_refuses_a_file_that_is_not_an_archive(run, tmp_path):
    archive = tmp_path / "oversight.tar"
    archive.write_text("name,amount\nacme,100\n" * 100)

    done = restore(archive)

    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith(f"CommandError: {archive} is not a backup archive")
    assert Run.objects.filter(pk=run.pk).exists()


def test_restore_refuses_while_workers_are_alive_unless_forced(run, tmp_path):
    archive = backed_up(tmp_path)
    WorkerHeartbeat.objects.create(name="host:42", seen_at=timezone.now())
    later = start_run(session=run.session, goal="written after the backup", actor=AGENT)

    refused = restore(archive)

    assert refused.returncode == 1
    assert refused.stderr.splitlines() == [
        "CommandError: workers are running (host:42): stop them first, or restore with --force"
    ]
    assert Run.objects.filter(pk=later.pk).exists()
    forced = restore(archive, "--force")
    assert forced.returncode == 0, forced.stderr
    assert not Run.objects.filter(pk=later.pk).exists()


# --- The acceptance: nothing fires after a restore until verified ----------------------


def stopped_at_its_intent() -> subprocess.Popen:
    """A worker that claimed the first approved operation, recorded its intent, and is
    stopped (SIGSTOP) before firing it."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.restore_child"],
        cwd=ROOT,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_line(worker, "PAUSED")
    return worker


def on_item(base: str, item: str) -> dict:
    return {
        "url": f"{base}/items/{item}",
        "verify": {"url": f"{base}/items/{item}", "json": {"colour": "green"}},
        "compensate": {"method": "DELETE", "url": f"{base}/items/{item}"},
    }


def drain() -> None:
    done = manage("runworker", "--once", "--lease-seconds", "5")
    assert done.returncode == 0, done.stderr


def statuses(*operations: Operation) -> list[str]:
    return [Operation.objects.get(pk=op.pk).status for op in operations]


def file_write_on_another_run(run: Run, propose, reviewer) -> Operation:
    """On a run of its own: an alert halts its run, and that run's other operations
    wait for a person too."""
    other = start_run(session=run.session, goal="Write today's notes", actor=AGENT)
    arguments = {"path": "notes/today.md", "content": "hello\n", "expected_sha256": None}
    op = propose(
        "notes", target=other, action="file.write", arguments=arguments, rollback_kind="in_band"
    )
    decide_on(op, reviewer)
    return op


def test_after_a_restore_nothing_fires_until_verified_and_an_admin_resumes(
    run, approved, propose, reviewer, target, deduplicating, tmp_path, settings
):
    get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    attach_artifact(run=run, name="invoice.txt", content=NOTE, actor=AGENT)
    fired_after = approved("http")  # Claimed, its intent recorded, then fired after the backup.
    worker = stopped_at_its_intent()
    not_claimed = approved("http", **on_item(target.base, "y"))  # Approved, never claimed.
    written = file_write_on_another_run(run, propose, reviewer)  # Approved, never claimed.
    archive = backed_up(tmp_path)
    worker.send_signal(signal.SIGCONT)  # Its effect lands after the backup: the target has it.
    assert worker.wait(timeout=60) == 0, worker.stderr.read()
    assert target.applied[fired_after.idempotency_key] == 1
    # The disaster: the database as the backup has it, the artifacts lost.
    settings.OVERSIGHT_ARTIFACT_ROOT = tmp_path / "fresh" / "artifacts"

    restored = restore(archive)

    assert restored.returncode == 0, restored.stderr
    assert "all invariants hold" in restored.stdout
    assert manage("verify_audit_chain").returncode == 0
    assert statuses(fired_after, not_claimed, written) == ["in_flight"] * 3
    for op in (fired_after, not_claimed, written):
        [checkpoint] = Operation.objects.get(pk=op.pk).checkpoints.filter(
            event="operation.restored"
        )
        assert checkpoint.actor_label == "restore"
    # Held, saying so to members without the server's folders: a worker claims nothing.
    [held] = WorkerPause.objects.all()
    assert held.reason.startswith(f"restored from {archive.name} at ")
    assert str(archive.parent) not in held.reason
    drain()
    assert statuses(fired_after, not_claimed, written) == ["in_flight"] * 3
    assert target.applied == {fired_after.idempotency_key: 1}
    assert not (workspace_of(run.project) / "notes/today.md").exists()

    resumed = manage("resume_workers", "--as", "root")
    assert resumed.returncode == 0, resumed.stderr
    drain()

    # Verified first: the effect that landed after the backup is committed, not fired again.
    assert statuses(fired_after, not_claimed, written) == ["committed", "alerted", "committed"]
    assert target.applied == {fired_after.idempotency_key: 1}
    assert "verified on resume" in Operation.objects.get(pk=fired_after.pk).status_reason
    # Nothing was captured before the other call, and the target cannot show it absent
    # without that: not fired, nothing compensated; a person decides.
    assert "nothing captured" in Alert.objects.get(operation=not_claimed).summary
    # Absent (the workspace is the target's state, not in the backup), at a target where
    # a repeat is harmless: carried on, once.
    assert (workspace_of(run.project) / "notes/today.md").read_text() == "hello\n"
    assert manage("check_invariants").returncode == 0


def test_a_rollback_under_way_at_backup_time_is_not_repeated_where_it_could_act_twice(
    approved, target, tmp_path
):
    """At backup time the operation's verification had failed and its compensation was
    due; the compensation may have been sent since, and the target does not
    deduplicate: after the restore a person decides instead."""
    op = approved("http-naive")
    op.refresh_from_db()
    worker = Actor.worker("w")
    before = {"before": {"status": 404, "fields": {}, "etag": None}}
    transition_operation(
        operation=op,
        to="in_flight",
        actor=worker,
        changes={"intent": before, "lease_expires_at": timezone.now() + timedelta(seconds=60)},
    )
    transition_operation(operation=op, to="verify_failed", actor=worker, reason="uncertain")
    target.RequestHandlerClass.state.items["x"] = {"colour": "blue"}  # Someone else's.
    get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    archive = backed_up(tmp_path)

    assert restore(archive).returncode == 0
    assert manage("resume_workers", "--as", "root").returncode == 0
    drain()

    assert statuses(op) == ["alerted"]
    assert target.applied == {}


def test_a_mail_sent_after_the_backup_is_not_sent_again_after_the_restore(approved, tmp_path):
    """email.send's record (``SentEmail``) is in the database: the restored one says "not
    sent" of a mail sent after the backup. A person decides, rather than a second mail."""
    get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    report = approved("email")
    archive = backed_up(tmp_path)
    printing = {
        "DJANGO_SETTINGS_MODULE": "tests.smtp_settings",
        "OVERSIGHT_EMAIL_BACKEND": "django.core.mail.backends.console.EmailBackend",
    }
    sent = manage("runworker", "--once", **printing)  # The mail goes out after the backup.
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.count("Subject: Report") == 1

    assert restore(archive).returncode == 0
    assert manage("resume_workers", "--as", "root").returncode == 0
    again = manage("runworker", "--once", "--lease-seconds", "5", **printing)

    assert again.returncode == 0, again.stderr
    assert "Subject: Report" not in again.stdout
    assert statuses(report) == ["alerted"]
    assert "happened after the backup" in Alert.objects.get(operation=report).summary


def test_an_approval_that_lapsed_by_the_restore_is_not_carried_out_late(
    run, propose, reviewer, tmp_path
):
    """Approved but not yet claimed at backup time; by the time the restore is checked
    and the workers resumed, its approval has lapsed: not fired, and the agent is told."""
    get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    written = file_write_on_another_run(run, propose, reviewer)
    archive = backed_up(tmp_path)
    assert restore(archive).returncode == 0
    lapsed = timezone.now() - timedelta(minutes=1)  # A day passed while it was restored.
    Operation.objects.filter(pk=written.pk).update(approval_expires_at=lapsed)

    assert manage("resume_workers", "--as", "root").returncode == 0
    drain()

    assert statuses(written) == ["failed"]
    assert "approval lapsed" in Operation.objects.get(pk=written.pk).status_reason
    assert not (workspace_of(run.project) / "notes/today.md").exists()


def test_a_decision_lost_with_the_backup_does_not_send_a_mail_twice(propose, reviewer, tmp_path):
    """Waiting for a decision at backup time; approved and sent after it. Restored, it
    waits again; approved again, its first claim verifies first: a person decides,
    rather than a second mail."""
    get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    mail = {"to": ["ops@example.com"], "subject": "Report", "body": "All green."}
    report = propose("mail", action="email.send", arguments=mail, rollback_kind="out_of_band")
    archive = backed_up(tmp_path)
    decide_on(report, reviewer)
    printing = {
        "DJANGO_SETTINGS_MODULE": "tests.smtp_settings",
        "OVERSIGHT_EMAIL_BACKEND": "django.core.mail.backends.console.EmailBackend",
    }
    assert manage("runworker", "--once", **printing).stdout.count("Subject: Report") == 1

    assert restore(archive).returncode == 0
    assert statuses(report) == ["proposed"]
    decide_on(report, reviewer)  # The reviewer, not knowing, approves it again.
    assert manage("resume_workers", "--as", "root").returncode == 0
    again = manage("runworker", "--once", "--lease-seconds", "5", **printing)

    assert again.returncode == 0, again.stderr
    assert "Subject: Report" not in again.stdout
    assert statuses(report) == ["alerted"]
