"""Retention of the checkpoint history (#37, item 4): archive_history writes the finished
runs of a range to one zip that verify_archive checks alone, anchors it in the database
and prunes those runs; what remains still verifies."""

import json
import zipfile
from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from runs.actors import Actor
from runs.audit.archive import Cut, anchor, prune, write_archive
from runs.canonical import json_hash, sha256_hex
from runs.chain import GENESIS, checkpoint_hash
from runs.engine.worker import Worker
from runs.models import (
    Account,
    AdminCheckpoint,
    Artifact,
    Checkpoint,
    HistoryArchive,
    Message,
    Operation,
    Project,
    Role,
    Run,
)
from runs.payloads import MessageKind
from runs.services.alerts import raise_alert
from runs.services.artifacts import attach_artifact
from runs.services.requeues import requeue_operation
from runs.services.runs import append_message, finish_run, open_session, start_run
from runs.transitions import record_run_event, transition_operation, transition_run
from tests.conftest import AGENT, issued, make_user
from tests.helpers import blob, decide_on, invariants_hold, stored

CUT = "--before"


def aged(run: Run, days: int) -> Run:
    """The run as if all of it had happened ``days`` ago: every checkpoint moved back
    and the chain hashed again, as a run of that time would have it."""
    previous = GENESIS
    for checkpoint in run.checkpoints.order_by("seq"):
        checkpoint.created_at -= timedelta(days=days)
        checkpoint.prev_hash = previous
        checkpoint.hash = checkpoint_hash(checkpoint)
        Checkpoint.objects.filter(pk=checkpoint.pk).update(
            created_at=checkpoint.created_at, prev_hash=previous, hash=checkpoint.hash
        )
        previous = checkpoint.hash
    Artifact.objects.filter(refs__checkpoint__run=run).update(
        stored_at=timezone.now() - timedelta(days=days)
    )
    run.refresh_from_db()
    return run


def ended(run: Run, days: int, *, report: bytes = b"paid\n") -> Run:
    """``run`` finished ``days`` ago, with a message, an artifact and an operation done."""
    append_message(run=run, kind=MessageKind.AGENT, payload={"text": "paying"}, actor=AGENT)
    attach_artifact(run=run, name="report.txt", content=report, actor=AGENT)
    finish_run(run=run, status=Run.Status.COMPLETED, actor=AGENT)
    return aged(run, days)


def new_run(session, goal: str = "Another goal", **kwargs) -> Run:
    return start_run(session=session, goal=goal, actor=AGENT, **kwargs)


def archive(*args: str) -> str:
    out = StringIO()
    call_command("archive_history", *args, stdout=out)
    return out.getvalue()


def cut_at(days: int) -> str:
    return (timezone.localdate() - timedelta(days=days)).isoformat()


def verify(path, *args: str) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    try:
        call_command("verify_archive", str(path), *args, stdout=out, stderr=err)
    except SystemExit as exit_:
        return exit_.code, out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def chains_verify() -> bool:
    out = StringIO()
    call_command("verify_audit_chain", stdout=out, stderr=StringIO())
    return "verify" in out.getvalue()


@pytest.fixture
def old(run, propose, reviewer, accounts) -> Run:
    """A run that ended 400 days ago, after a transfer that a reviewer approved."""
    decide_on(propose("pay"), reviewer)
    Worker("test-worker").drain()
    return ended(run, 400, report=b"old report\n")


@pytest.fixture
def out(tmp_path):
    return tmp_path / "history.zip"


def test_a_finished_run_older_than_the_cut_is_archived_and_pruned(old, session, out):
    recent = ended(new_run(session, "Recent"), 10, report=b"recent report\n")
    unfinished = aged(new_run(session, "Still open"), 400)
    old_blob = blob(sha256_hex(b"old report\n"))

    said = archive("--out", str(out), CUT, cut_at(30))

    assert said.splitlines()[0].startswith(f"archived 1 run(s) ({old.version} checkpoints) to")
    assert "pruned 1 run(s)" in said
    assert list(Run.objects.order_by("pk").values_list("pk", flat=True)) == [
        recent.pk,
        unfinished.pk,
    ]
    for model in (Checkpoint, Operation, Message):
        assert not model.objects.filter(run_id=old.pk).exists()
    assert not old_blob.exists()
    assert blob(sha256_hex(b"recent report\n")).exists()
    assert chains_verify()
    assert invariants_hold()


def test_an_old_run_with_an_open_alert_stays(propose, reviewer, run, out):
    operation = propose("call-1")
    decide_on(operation, reviewer)
    for status in (Operation.Status.IN_FLIGHT, Operation.Status.VERIFY_FAILED):
        transition_operation(operation=operation, to=status, actor=AGENT)
    raise_alert(operation=operation, actor=AGENT, summary="Verify failed", state_left={})
    run.refresh_from_db()
    transition_run(run=run, to=Run.Status.FAILED, actor=AGENT, outcome="gave up")
    aged(run, 400)

    assert archive("--out", str(out), CUT, cut_at(30)).strip() == (
        "nothing to archive: no finished run is due"
    )
    assert Run.objects.filter(pk=run.pk).exists()
    assert not out.exists()


def test_a_run_that_a_kept_run_retries_stays(old, session, out):
    new_run(session, "Try again", retry_of=old)

    said = archive("--out", str(out), CUT, cut_at(30))

    assert f"run {old.pk} stays: run" in said
    assert Run.objects.filter(pk=old.pk).exists()


def test_the_archive_verifies_alone(old, out, settings, django_assert_num_queries):
    archive("--out", str(out), CUT, cut_at(30))
    settings.OVERSIGHT_ARTIFACT_ROOT = out.parent / "nowhere"

    with django_assert_num_queries(0):
        code, said, err = verify(out)

    assert (code, err) == (0, "")
    assert said.startswith(f"archive {out} verifies: 1 run(s), {old.version} checkpoints")


def rewritten(path, name: str, change) -> None:
    """``path`` with its member ``name`` replaced by ``change(bytes)``."""
    with zipfile.ZipFile(path) as archive:
        files = {member: archive.read(member) for member in archive.namelist()}
    files[name] = change(files[name])
    with zipfile.ZipFile(path, "w") as archive:
        for member, content in files.items():
            archive.writestr(member, content)


def one_byte_changed(content: bytes) -> bytes:
    at = content.index(b"paying")
    return content[:at] + b"b" + content[at + 1 :]


def test_one_byte_changed_in_the_evidence_fails_verification(old, out):
    archive("--out", str(out), CUT, cut_at(30))
    rewritten(out, f"runs/{old.pk}/evidence.json", one_byte_changed)

    code, _, err = verify(out)

    assert code == 1
    assert f"broken: run {old.pk}: runs/{old.pk}/evidence.json does not match the sha256" in err


def test_bit_rot_in_a_compressed_member_is_one_line(old, out):
    """Years later the archive's bytes may have rotted: a compressed member that no longer
    inflates is reported, not a traceback."""
    archive("--out", str(out), CUT, cut_at(30))
    with zipfile.ZipFile(out) as zipped:
        member = zipped.getinfo(f"runs/{old.pk}/evidence.json")
    content = bytearray(out.read_bytes())
    header = member.header_offset
    name_length = int.from_bytes(content[header + 26 : header + 28], "little")
    extra_length = int.from_bytes(content[header + 28 : header + 30], "little")
    data = header + 30 + name_length + extra_length
    for offset in range(data, data + member.compress_size // 2):
        content[offset] ^= 0xFF
    out.write_bytes(bytes(content))

    with pytest.raises(CommandError, match="is not a history archive, or is damaged"):
        verify(out)


def test_one_byte_changed_in_an_artifact_fails_verification(old, out):
    archive("--out", str(out), CUT, cut_at(30))
    sha256 = sha256_hex(b"old report\n")
    rewritten(out, f"artifacts/{sha256}", lambda content: b"n" + content[1:])

    code, _, err = verify(out)

    assert code == 1
    assert f"report.txt: artifacts/{sha256} does not match its sha256" in err


def test_a_rewritten_manifest_passes_alone_but_not_against_its_anchor(old, out):
    """Whoever rewrites the file can recompute its digest: the anchor is what they
    cannot rewrite."""
    archive("--out", str(out), CUT, cut_at(30))
    assert verify(out, "--anchored")[0] == 0

    def forged(content: bytes) -> bytes:
        manifest = json.loads(content)
        del manifest["digest"]
        manifest["archive"]["generated_by"]["label"] = "someone else"
        return json.dumps({**manifest, "digest": json_hash(manifest)}).encode()

    rewritten(out, "archive.json", forged)

    assert verify(out)[0] == 0
    code, _, err = verify(out, "--anchored")
    assert code == 1
    assert "no anchor in this database has the file's sha256" in err


def test_the_anchor_and_the_admin_checkpoint_name_the_file(old, out, admin_user):
    head = old.checkpoints.get(seq=old.version).hash

    archive("--out", str(out), CUT, cut_at(30), "--as", "admin")

    sha256 = sha256_hex(out.read_bytes())
    (anchor_row,) = HistoryArchive.objects.all()
    assert (anchor_row.sha256, anchor_row.name, anchor_row.runs, anchor_row.pruned) == (
        sha256,
        "history.zip",
        1,
        1,
    )
    assert anchor_row.heads == {str(old.pk): head}
    assert anchor_row.actor_user == admin_user
    (act,) = AdminCheckpoint.objects.filter(event="history.archived")
    assert (act.project, act.actor_user) == (old.project, admin_user)
    assert act.detail == {
        "sha256": sha256,
        "file": "history.zip",
        "runs": 1,
        "checkpoints": old.version,
    }


def test_by_default_the_retention_policy_archives(old, out):
    archive("--out", str(out), CUT, cut_at(30))

    act = AdminCheckpoint.objects.get(event="history.archived")
    assert (act.actor_kind, act.actor_label) == ("policy", "retention")


def test_a_dry_run_changes_nothing(old, out):
    before = stored()

    said = archive("--out", str(out), CUT, cut_at(30), "--dry-run")

    assert said.splitlines()[0].startswith(f"would archive and prune run {old.pk} (acme, ended")
    assert said.splitlines()[-1].endswith("; nothing changed")
    assert stored() == before
    assert not out.exists()
    assert not HistoryArchive.objects.exists()


def test_a_second_run_archives_nothing_more(old, out, tmp_path):
    archive("--out", str(out), CUT, cut_at(30))

    again = tmp_path / "again.zip"
    assert archive("--out", str(again), CUT, cut_at(30)).strip() == (
        "nothing to archive: no finished run is due"
    )
    assert not again.exists()
    assert HistoryArchive.objects.count() == 1


def test_the_policy_uses_each_project_s_days(old, session, other_project, out):
    Project.objects.filter(pk=old.project_id).update(history_days=100)
    younger = ended(new_run(session, "Younger"), 50, report=b"younger\n")
    owner = make_user("other-owner", other_project, Role.REVIEWER)
    elsewhere = open_session(
        project=other_project,
        owner=owner,
        agent="other-agent",
        token=issued(other_project, "other-agent", owner),
    )
    kept_forever = ended(new_run(elsewhere, "Kept forever"), 400, report=b"other\n")

    archive("--out", str(out), "--policy")

    remaining = set(Run.objects.values_list("pk", flat=True))
    assert remaining == {younger.pk, kept_forever.pk}
    assert HistoryArchive.objects.get().cut == {"history_days": {"acme": 100}, "project": None}


def test_a_run_that_changes_after_it_was_written_is_not_pruned(old, out):
    now = timezone.now()
    cut = Cut(now=now, before=now - timedelta(days=30))
    written = write_archive(out, cut, actor=Actor.policy("retention"))
    record_run_event(run=old, actor=AGENT, event="run.noted", reason="a late note")

    pruned, kept = prune(written, anchor(written, cut, actor=Actor.policy("retention")))

    assert (pruned, kept) == ([], [f"run {old.pk} stays: it changed after it was archived"])
    assert Run.objects.filter(pk=old.pk).exists()
    assert chains_verify()


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((CUT, "2024-02-30"), "--before: '2024-02-30' is not a date"),
        ((CUT, "last year"), "--before: 'last year' is not a date"),
        ((CUT, "2024-01-01", "--project", "nope"), "--project: no project 'nope'"),
        ((CUT, "2024-01-01", "--as", "nobody"), "no active user named 'nobody'"),
        ((CUT, "2024-01-01", "--as", "reviewer"), "--as: reviewer is not an admin of project"),
    ],
)
def test_a_mistake_is_one_line(project, reviewer, out, args, error):
    with pytest.raises(CommandError, match=error):
        archive("--out", str(out), *args)


def test_an_existing_file_is_never_overwritten(old, out):
    out.write_bytes(b"something else")

    with pytest.raises(CommandError, match="exists already"):
        archive("--out", str(out), CUT, cut_at(30))

    assert out.read_bytes() == b"something else"
    assert Run.objects.filter(pk=old.pk).exists()


def test_a_run_with_a_requeue_is_pruned_whole(run, approved, reviewer, out):
    """An operation requeued points at the one it repeats, in the same run: both go."""
    operator = make_user("ops", run.project, Role.ADMIN)
    transfer = approved("ledger")  # It keeps 1,000.00 in A.
    Account.objects.filter(name="A").update(balance=Decimal("500.00"))
    Worker("test-worker").drain()
    Account.objects.filter(name="A").update(balance=Decimal("5000.00"))
    requeue, _ = requeue_operation(operation=transfer, user=operator, reason="A topped up")
    decide_on(requeue, reviewer)
    Worker("test-worker").drain()
    ended(run, 400)

    assert "pruned 1 run(s)" in archive("--out", str(out), CUT, cut_at(30))
    assert not Operation.objects.filter(run_id=run.pk).exists()
