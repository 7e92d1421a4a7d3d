"""History archives (#37, item 4): finished runs written to one zip that verifies
alone, then pruned from the database, leaving an anchor (``HistoryArchive``) and an
admin checkpoint that name the file's sha256.

The zip holds, for each run, ``runs/<id>/evidence.json`` (the evidence bundle's, as
``runs.audit.evidence`` writes it) and, once for all runs, ``artifacts/<sha256>``; and
``archive.json``: the cut, who made it, each run's chain head, checkpoint count and the
sha256 of its ``evidence.json``, and a digest over all of that. The digest proves the
file is whole, not who wrote it: whoever could rewrite the file could recompute it, so
``verify_archive --anchored`` also checks the file's sha256 against its anchor.

A run is due when it ended (its terminal ``run.status`` checkpoint) before the cut,
has no unresolved alert, and no operation or request not in a final state. A finished
run is never resumed (terminal is final), but a newer run may retry it, and a retry
points at it: a run is archived only if every run retrying it is archived too. The
session is not pruned: it holds no history, and its agent may still start runs in it.

Order, so that a crash anywhere loses nothing: the file is written (temp file, fsync,
link into place, fsync of the folder) and read back; then the anchor and the admin
checkpoints commit; only then is each run deleted, one transaction per run, under the
run's lock and only if its version is still the one archived (a run that changed
meanwhile stays, for a later archive).
"""

import json
import os
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import batched
from pathlib import Path

from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q, QuerySet, Subquery

from runs import machines
from runs.actors import Actor
from runs.audit.evidence import add_artifact, bundle_problems, evidence_files, evidence_json
from runs.canonical import json_hash, sha256_hex
from runs.durable_files import file_sha256, sync_folder
from runs.models import (
    Alert,
    AlertDelivery,
    Checkpoint,
    CheckpointArtifact,
    Decision,
    FeedEvent,
    HistoryArchive,
    HumanRequest,
    Message,
    Operation,
    Project,
    Run,
    WebhookEvent,
)
from runs.services.admin_record import record_admin_act
from runs.services.artifacts import collect_orphan_artifacts
from runs.transitions import lock_run

FORMAT = 1
MANIFEST = "archive.json"
RETENTION = Actor.policy("retention")
CHUNK = 200
# As collect_orphan_artifacts' own default: a blob stored this recently may be about
# to be referenced by a checkpoint being written.
ORPHAN_GRACE = timedelta(minutes=60)

# What hangs from a run, leaves first (every key to a run's rows is PROTECT). Deleting
# an operation or a request takes its Slack messages and "already emailed" rows along.
HANGING = (
    (FeedEvent, "checkpoint__run"),
    (CheckpointArtifact, "checkpoint__run"),
    (Checkpoint, "run"),
    (AlertDelivery, "alert__run"),
    (Alert, "run"),
    (Decision, "operation__run"),
    (Operation, "run"),
    (HumanRequest, "run"),
    (Message, "run"),
)


# What reading a zip that is not one of ours, or one gone bad, raises: bit rot in a
# compressed member (zlib.error), an encrypted or unknown member (RuntimeError,
# NotImplementedError), a manifest of the wrong shape (AttributeError, KeyError…).
DAMAGED = (
    OSError,
    zipfile.BadZipFile,
    zlib.error,
    RuntimeError,
    NotImplementedError,
    AttributeError,
    KeyError,
    ValueError,
    TypeError,
)


class ArchiveError(Exception):
    """Why no archive was written, or why one does not verify: one line."""


@dataclass(frozen=True)
class Cut:
    """Which finished runs are due: ended before ``before``; with a policy
    (``days``: project id → ``history_days``), before now minus their project's days."""

    now: datetime
    before: datetime | None = None
    days: dict[int, int] | None = None
    project: Project | None = None

    @classmethod
    def by_policy(cls, *, now: datetime, project: Project | None = None) -> "Cut":
        projects = Project.objects.filter(history_days__isnull=False)
        if project is not None:
            projects = projects.filter(pk=project.pk)
        return cls(now=now, days=dict(projects.values_list("pk", "history_days")), project=project)

    def condition(self) -> Q:
        if self.days is None:
            found = Q(ended_at__lt=self.before)
            return found & Q(project=self.project) if self.project else found
        found = Q(pk__in=[])
        for project_id, days in self.days.items():
            found |= Q(project_id=project_id, ended_at__lt=self.now - timedelta(days=days))
        return found

    def projects(self) -> QuerySet[Project]:
        """The projects whose runs the cut may take."""
        if self.days is not None:
            return Project.objects.filter(pk__in=self.days)
        if self.project is not None:
            return Project.objects.filter(pk=self.project.pk)
        return Project.objects.all()

    def described(self) -> dict:
        """The cut as the manifest and the anchor record it."""
        if self.days is None:
            cut = {"before": _when(self.before)}
        else:
            slugs = dict(Project.objects.filter(pk__in=self.days).values_list("pk", "slug"))
            cut = {"history_days": {slugs[pk]: days for pk, days in self.days.items()}}
        return {**cut, "project": self.project.slug if self.project else None}


@dataclass(frozen=True)
class Entry:
    """One run in the archive, as the manifest lists it."""

    run: int
    project_id: int
    project: str
    ended_at: datetime
    head: str
    checkpoints: int
    evidence_sha256: str

    def listed(self) -> dict:
        return {
            "id": self.run,
            "project": self.project,
            "ended_at": _when(self.ended_at),
            "head": self.head,
            "checkpoints": self.checkpoints,
            "evidence_sha256": self.evidence_sha256,
        }


@dataclass
class Written:
    path: Path
    entries: list[Entry] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    sha256: str = ""


def _when(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).isoformat() if moment else None


def due_runs(cut: Cut) -> QuerySet[Run]:
    """The finished runs the cut takes, newest first (a retry is newer than the run it
    retries, so it is decided first)."""
    ended = Checkpoint.objects.filter(
        run=OuterRef("pk"), event="run.status", to_status__in=machines.RUN.terminal
    ).values("created_at")[:1]
    unfinished_operations = Operation.objects.filter(run=OuterRef("pk")).exclude(
        status__in=machines.OPERATION.terminal
    )
    open_requests = HumanRequest.objects.filter(run=OuterRef("pk")).exclude(
        status__in=machines.REQUEST.terminal
    )
    return (
        Run.objects.filter(status__in=machines.RUN.terminal)
        .annotate(ended_at=Subquery(ended))
        .filter(cut.condition())
        .exclude(Exists(Alert.objects.unresolved().filter(run=OuterRef("pk"))))
        .exclude(Exists(unfinished_operations))
        .exclude(Exists(open_requests))
        .select_related("project", "session__owner", "session__token")
        .order_by("-pk")
    )


def selected(cut: Cut, *, by: str) -> Iterator[tuple[Run, dict, dict[str, Path]] | str]:
    """Each due run with its evidence and artifact files, or a line saying why a due
    run stays: a kept run retries it, or its evidence would not verify (the archive
    must verify alone; ``check_invariants`` says what is wrong with it)."""
    chosen: set[int] = set()
    for run in due_runs(cut).iterator(chunk_size=CHUNK):
        staying = set(run.retries.values_list("pk", flat=True)) - chosen
        if staying:
            yield f"run {run.pk} stays: run {min(staying)} retries it and stays"
            continue
        content, blobs = evidence_files(run, generated_by=by, now=cut.now)
        if why := _not_whole(content):
            yield f"run {run.pk} stays: {why}"
            continue
        chosen.add(run.pk)
        yield run, content, blobs


def _not_whole(content: dict) -> str | None:
    if not content["chain"]["verified"]:
        return f"its chain does not verify ({content['chain']['broken_link']})"
    if gone := content["missing_artifacts"] + content["altered_artifacts"]:
        return f"artifact {gone[0]} is missing or altered"
    return None


def write_archive(path: Path, cut: Cut, *, actor: Actor) -> Written:
    """Write the archive of the due runs to ``path`` (never over an existing file) and
    read it back; nothing is written when no run is due."""
    written = Written(path)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-", suffix=".part")
    try:
        with os.fdopen(fd, "w+b") as handle:
            with zipfile.ZipFile(handle, "w", zipfile.ZIP_DEFLATED) as archive:
                _write_runs(archive, cut, actor, written)
                if written.entries:
                    archive.writestr(MANIFEST, json.dumps(_manifest(cut, actor, written), indent=2))
            handle.flush()
            os.fsync(handle.fileno())
        if written.entries:
            os.link(temp, path)  # Unlike a rename, refuses to replace a file already there.
            sync_folder(path.parent)
    finally:
        Path(temp).unlink(missing_ok=True)
    if written.entries:
        _read_back(written)
    return written


def _write_runs(archive: zipfile.ZipFile, cut: Cut, actor: Actor, written: Written) -> None:
    stored: set[str] = set()
    for item in selected(cut, by=actor.label):
        if isinstance(item, str):
            written.kept.append(item)
            continue
        run, content, blobs = item
        data = evidence_json(content)
        archive.writestr(f"runs/{run.pk}/evidence.json", data)
        for sha256 in blobs:
            if sha256 not in stored:
                add_artifact(archive, sha256)
                stored.add(sha256)
        chain = content["chain"]
        written.entries.append(
            Entry(
                run.pk,
                run.project_id,
                run.project.slug,
                run.ended_at,
                chain["head"],
                chain["length"],
                sha256_hex(data),
            )
        )


def _manifest(cut: Cut, actor: Actor, written: Written) -> dict:
    ended = [entry.ended_at for entry in written.entries]
    manifest = {
        "archive": {
            "format": FORMAT,
            "generated_at": _when(cut.now),
            "generated_by": {"kind": str(actor.kind), "label": actor.label},
            "cut": cut.described(),
            "first_ended_at": _when(min(ended)),
            "last_ended_at": _when(max(ended)),
        },
        "runs": [entry.listed() for entry in written.entries],
    }
    return {**manifest, "digest": json_hash(manifest)}


def _read_back(written: Written) -> None:
    """Check the file as a reader will, before anything is deleted; a file that does
    not verify is removed, and nothing is pruned."""
    _, problems = checked(written.path)
    if problems:
        written.path.unlink()
        raise ArchiveError(f"the archive written does not verify ({problems[0]}): nothing pruned")
    written.sha256 = file_sha256(written.path)


def checked(path: Path) -> tuple[dict, list[str]]:
    """The archive's manifest, and everything wrong with the archive."""
    try:
        with zipfile.ZipFile(path) as archive:
            return manifest_of(archive), archive_problems(archive)
    except DAMAGED as error:
        raise ArchiveError(f"{path} is not a history archive, or is damaged: {error}") from None


class _RunInArchive:
    """One run's evidence in an archive, as ``bundle_problems`` reads a bundle: its
    ``evidence.json`` under ``runs/<id>/``, the artifacts shared at the top."""

    def __init__(self, archive: zipfile.ZipFile, run_id: int) -> None:
        self.archive, self.folder = archive, f"runs/{run_id}/"

    def read(self, name: str) -> bytes:
        return self.archive.read(self.folder + name if name == "evidence.json" else name)

    def namelist(self) -> list[str]:
        return self.archive.namelist()


def manifest_of(archive: zipfile.ZipFile) -> dict:
    return json.loads(archive.read(MANIFEST))


def archive_problems(archive: zipfile.ZipFile) -> list[str]:
    """Everything wrong with an archive, from its own content alone: the manifest's
    digest; for each run listed, its ``evidence.json`` is the one listed (sha256), its
    chain ends at the head and count listed, and it verifies as a bundle does (every
    link, every artifact's bytes); and no run's evidence is there unlisted."""
    manifest = manifest_of(archive)
    problems = []
    if manifest.get("digest") != json_hash({k: v for k, v in manifest.items() if k != "digest"}):
        problems.append(f"{MANIFEST} does not match its digest (edited)")
    for listed in manifest["runs"]:
        problems += [f"run {listed['id']}: {p}" for p in _run_problems(archive, listed)]
    folders = {f"runs/{listed['id']}/evidence.json" for listed in manifest["runs"]}
    unlisted = {n for n in archive.namelist() if n.startswith("runs/")} - folders
    problems += [f"{name} is not in {MANIFEST}" for name in sorted(unlisted)]
    return problems


def _run_problems(archive: zipfile.ZipFile, listed: dict) -> list[str]:
    name = f"runs/{listed['id']}/evidence.json"
    if name not in archive.namelist():
        return [f"{name} is not in the archive"]
    data = archive.read(name)
    if sha256_hex(data) != listed["evidence_sha256"]:
        return [f"{name} does not match the sha256 {MANIFEST} lists (edited)"]
    checkpoints = json.loads(data)["checkpoints"]
    head = checkpoints[-1]["hash"] if checkpoints else None
    if (head, len(checkpoints)) != (listed["head"], listed["checkpoints"]):
        return [f"its chain does not end at the head and count {MANIFEST} lists"]
    return bundle_problems(_RunInArchive(archive, listed["id"]))


def anchor_problems(path: Path, manifest: dict) -> list[str]:
    """What does not agree between the file and its anchor in this database."""
    sha256 = file_sha256(path)
    anchor = HistoryArchive.objects.filter(sha256=sha256).first()
    if anchor is None:
        return [f"no anchor in this database has the file's sha256 {sha256}"]
    heads = {str(listed["id"]): listed["head"] for listed in manifest["runs"]}
    if heads != anchor.heads:
        return [f"the runs and heads differ from those of its anchor ({anchor.name})"]
    return []


@transaction.atomic
def anchor(written: Written, cut: Cut, *, actor: Actor) -> HistoryArchive:
    """The anchor, and one ``history.archived`` admin checkpoint per project the
    archive holds runs of, naming the file's sha256: committed before any deletion."""
    ended = [entry.ended_at for entry in written.entries]
    archive = HistoryArchive.objects.create(
        name=written.path.name,
        sha256=written.sha256,
        actor_kind=actor.kind,
        actor_user=actor.user,
        actor_label=actor.label,
        cut=cut.described(),
        first_ended_at=min(ended),
        last_ended_at=max(ended),
        runs=len(written.entries),
        checkpoints=sum(entry.checkpoints for entry in written.entries),
        heads={str(entry.run): entry.head for entry in written.entries},
    )
    projects = Project.objects.in_bulk({entry.project_id for entry in written.entries})
    for project_id, project in sorted(projects.items()):
        mine = [entry for entry in written.entries if entry.project_id == project_id]
        detail = {
            "sha256": written.sha256,
            "file": written.path.name,
            "runs": len(mine),
            "checkpoints": sum(entry.checkpoints for entry in mine),
        }
        record_admin_act("history.archived", actor, project=project, detail=detail)
    return archive


def prune(written: Written, archive: HistoryArchive) -> tuple[list[int], list[str]]:
    """Delete each archived run (newest first: a retry before the run it retries);
    returns the runs pruned and a line for each one kept."""
    pruned, kept = [], []
    for entry in written.entries:
        if why := prune_run(entry, archive):
            kept.append(f"run {entry.run} stays: {why}")
        else:
            pruned.append(entry.run)
    for chunk in batched(pruned, CHUNK):
        # Their webhook events name them by id only; nothing will send them any more.
        WebhookEvent.objects.filter(data__run__in=chunk).delete()
    return pruned, kept


@transaction.atomic
def prune_run(entry: Entry, archive: HistoryArchive) -> str | None:
    """Delete the run and everything that hangs from it, under its lock, if it is
    still as archived; otherwise say why it stays."""
    try:
        run = lock_run(entry.run)
    except Run.DoesNotExist:
        return "it is gone already"
    if run.version != entry.checkpoints:
        return "it changed after it was archived"
    if run.retries.exists():
        return "a newer run retries it"
    for model, lookup in HANGING:
        model.objects.filter(**{lookup: run.pk}).delete()
    Run.objects.filter(pk=run.pk).delete()
    HistoryArchive.objects.filter(pk=archive.pk).update(pruned=F("pruned") + 1)
    return None


@dataclass(frozen=True)
class Archived:
    written: Written
    anchor: HistoryArchive | None
    pruned: list[int]
    kept: list[str]
    removed_artifacts: list[str]


def archive_history(path: Path, cut: Cut, *, actor: Actor) -> Archived:
    """Write the archive, anchor it, prune what it holds, then remove the artifact files
    no remaining checkpoint names (the pruned runs' among them)."""
    written = write_archive(path, cut, actor=actor)
    if not written.entries:
        return Archived(written, None, [], written.kept, [])
    archive = anchor(written, cut, actor=actor)
    pruned, kept = prune(written, archive)
    removed = collect_orphan_artifacts(older_than=ORPHAN_GRACE)
    return Archived(written, archive, pruned, written.kept + kept, removed)
