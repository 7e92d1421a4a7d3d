"""Backups of a whole installation, and restores that fire nothing until verified.

A backup is one tar archive: ``manifest.json`` first, then the database part (a SQLite
copy or a ``pg_dump -Fc``; ``runs.database_copies``), then each artifact it names under
``artifacts/``. Tar, not zip: the standard ``tar`` lists and extracts it anywhere,
Python writes and reads it as a stream, one member at a time, and the dump is
compressed already. The database is copied first; then the artifacts that copy names
(content-addressed, so a blob never changes once written): one removed meanwhile that
a checkpoint references fails the backup, rather than writing an archive that would
not restore. The archive is written beside its destination, fsynced, then linked into
place: never half a file under the name, never over an existing one.

A restore checks the whole archive before touching anything (manifest, each
artifact's sha256, the database part's sha256 and integrity, the migrations this
version's), refuses while workers are alive, writes the artifacts, replaces the
database's content, and then holds everything that may have fired between the backup
and the disaster: the workers are paused (``pause_workers``) until an admin resumes
them, and every operation approved or in flight is taken over, so its next claim
verifies first (``runs.engine.executor``)."""

import hashlib
import io
import json
import logging
import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.migrations.loader import MigrationLoader
from django.utils import timezone

from oversight.version import VERSION
from runs import artifact_store, database_copies
from runs.actors import Actor
from runs.clock import db_now
from runs.durable_files import file_sha256, sync_folder
from runs.engine.executor import NOTHING_CAPTURED, RESTORED
from runs.errors import InvalidInput, OversightError, StaleVersion
from runs.models import Operation, WorkerHeartbeat
from runs.models.operations import LEASED
from runs.models.workers import WorkerPause
from runs.services.pauses import pause_workers, resume_workers
from runs.transitions import transition_operation

FORMAT, FORMAT_VERSION = "oversight-backup", 1
MANIFEST = "manifest.json"
DATABASE = {"sqlite": "database.sqlite3", "postgresql": "database.pgdump"}
ARTIFACTS = "artifacts/"
RESTORE = Actor.policy("restore")
log = logging.getLogger(__name__)
# Waiting for a decision, approved, or between its claim and its end: it may have been
# decided and fired after the backup.
MAY_HAVE_FIRED = (Operation.Status.PROPOSED, Operation.Status.APPROVED, *LEASED)


def _member(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, int(timezone.now().timestamp()), 0o600
    return info


# --- Backup ----------------------------------------------------------------------------


def backup(path: Path) -> dict:
    """Write the archive of the database and its artifacts to ``path`` (which must not
    exist yet); returns its manifest."""
    if path.exists():
        raise InvalidInput(f"{path} already exists; choose a new file")
    path.parent.mkdir(parents=True, exist_ok=True)
    backend = database_copies.backend()
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".backup-") as work:
        database = Path(work) / DATABASE[backend]
        named, migrations = database_copies.snapshot(database)
        database_copies.check(database, path)
        artifacts = [(sha, size) for sha, size, referenced in named if _kept(sha, referenced)]
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "oversight_version": VERSION,
            "backend": backend,
            "taken_at": timezone.now().isoformat(timespec="seconds"),
            "migrations": [list(migration) for migration in migrations],
            "database": {"name": database.name, "sha256": file_sha256(database)},
            "artifacts": [{"sha256": sha, "size": size} for sha, size in artifacts],
        }
        written = Path(work) / "archive.tar"
        _write_archive(written, manifest, database)
        os.link(written, path)  # Fails, rather than replaces, if the name was taken.
    sync_folder(path.parent)
    return manifest


def _kept(sha256: str, referenced: bool) -> bool:
    """Whether the archive holds this artifact: yes if its blob is there; an orphan
    collected since the copy is left out; a referenced one missing fails the backup."""
    if artifact_store.exists(sha256):
        return True
    if referenced:
        raise InvalidInput(
            f"artifact {sha256} is referenced by a checkpoint but missing from the "
            "artifact store: a backup without it would not restore "
            "(check_invariants lists what is missing)"
        )
    return False


def _write_archive(path: Path, manifest: dict, database: Path) -> None:
    """Readable by its owner only: it holds the whole database (sessions, password
    hashes) and every artifact."""
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as handle:
        with tarfile.open(fileobj=handle, mode="w", format=tarfile.PAX_FORMAT) as archive:
            text = json.dumps(manifest, indent=2).encode()
            archive.addfile(_member(MANIFEST, len(text)), io.BytesIO(text))
            with database.open("rb") as part:
                archive.addfile(_member(database.name, database.stat().st_size), part)
            for artifact in manifest["artifacts"]:
                content = _artifact_bytes(artifact["sha256"], artifact["size"])
                name = ARTIFACTS + artifact["sha256"]
                archive.addfile(_member(name, len(content)), io.BytesIO(content))
        handle.flush()
        os.fsync(handle.fileno())


def _artifact_bytes(sha256: str, size: int) -> bytes:
    try:
        content = artifact_store.read(sha256)
    except artifact_store.ArtifactDamaged:
        raise InvalidInput(
            f"artifact {sha256} in storage no longer has its sha256: damaged"
        ) from None
    if len(content) != size:
        raise InvalidInput(f"artifact {sha256} in storage has {len(content)} bytes, not {size}")
    return content


# --- Restore: checks -------------------------------------------------------------------


@dataclass
class Checked:
    """An archive that passed every check, with its database part extracted."""

    path: Path
    manifest: dict
    database: Path


def checked(path: Path, work: Path) -> Checked:
    """Check the whole archive at ``path``, extracting its database part into ``work``;
    ``InvalidInput`` (one line) at the first problem."""
    if not path.is_file():
        raise InvalidInput(f"{path} is not a file")
    try:
        with tarfile.open(path, mode="r:") as archive:
            manifest = _manifest(archive, path)
            database = _extracted_database(archive, manifest, path, work)
            _check_artifacts(archive, manifest, path)
    except (tarfile.TarError, EOFError) as error:
        raise InvalidInput(f"{path} is not a backup archive (not a tar file: {error})") from None
    except (KeyError, TypeError):
        raise InvalidInput(
            f"{path} is not an Oversight backup: its {MANIFEST} is incomplete"
        ) from None
    _same_migrations(database_copies.check(database, path), path)
    return Checked(path, manifest, database)


def _manifest(archive: tarfile.TarFile, path: Path) -> dict:
    try:
        manifest = json.loads(_read(archive, MANIFEST, path))
    except (InvalidInput, ValueError):
        raise InvalidInput(f"{path} is not an Oversight backup: no readable {MANIFEST}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise InvalidInput(f"{path} is not an Oversight backup: its {MANIFEST} is another's")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise InvalidInput(
            f"{path} is a backup of format {manifest.get('format_version')}; this version "
            f"reads format {FORMAT_VERSION}: restore it with the version that made it"
        )
    if manifest.get("backend") != connection.vendor:
        raise InvalidInput(
            f"{path} is a backup of a {manifest.get('backend')} database; this installation "
            f"uses {connection.vendor}"
        )
    _same_migrations({tuple(migration) for migration in manifest["migrations"]}, path)
    return manifest


def _read(archive: tarfile.TarFile, name: str, path: Path) -> bytes:
    return _opened(archive, name, path).read()


def _opened(archive: tarfile.TarFile, name: str, path: Path):
    try:
        handle = archive.extractfile(name)
    except KeyError:
        handle = None
    if handle is None:
        raise InvalidInput(f"{path} lacks {name}")
    return handle


def _extracted_database(archive: tarfile.TarFile, manifest: dict, path: Path, work: Path) -> Path:
    """The database part, copied out a chunk at a time (it may be larger than memory)."""
    part = manifest["database"]
    database = work / DATABASE[manifest["backend"]]
    with database.open("wb") as copy:
        shutil.copyfileobj(_opened(archive, part["name"], path), copy, 1 << 20)
    if file_sha256(database) != part["sha256"]:
        raise InvalidInput(
            f"{path}: the database part does not have the sha256 its manifest gives: "
            "altered or damaged"
        )
    return database


def _check_artifacts(archive: tarfile.TarFile, manifest: dict, path: Path) -> None:
    for artifact in manifest["artifacts"]:
        sha256 = artifact["sha256"]
        try:
            content = _read(archive, ARTIFACTS + sha256, path)
        except InvalidInput:
            raise InvalidInput(
                f"{path} lacks artifact {sha256}, which its manifest lists"
            ) from None
        if hashlib.sha256(content).hexdigest() != sha256:
            raise InvalidInput(
                f"{path}: artifact {sha256} does not have its sha256: altered or damaged"
            )


def _same_migrations(applied: set[tuple[str, str]], path: Path) -> None:
    """Refuse a backup made by another version: its schema is not the one this code reads
    (a rollback restores with the version that made the backup; docs/operating/upgrading.md)."""
    known = set(MigrationLoader(None, ignore_no_migrations=True).graph.nodes)
    if missing := sorted(known - applied):
        raise InvalidInput(
            f"{path} was made by an older version (without migration "
            f"{'.'.join(missing[0])}): restore it with that version, then upgrade"
        )
    if unknown := sorted(applied - known):
        raise InvalidInput(
            f"{path} was made by a newer version (with migration {'.'.join(unknown[0])}): "
            "restore it with that version"
        )


def refuse_while_workers_alive(then: str = "stop them first, or restore with --force") -> None:
    """Workers alive by their heartbeat (``/healthz``'s rule) would go on firing from the
    database being replaced (or left): refused, saying what to do ``then``. A database
    without the table (a new one) has none."""
    alive_since = db_now() - timedelta(seconds=settings.OVERSIGHT_HEALTH_WORKER_SECONDS)
    try:
        alive = list(WorkerHeartbeat.objects.filter(seen_at__gte=alive_since)[:3])
    except DatabaseError:
        return
    if alive:
        names = ", ".join(worker.name for worker in alive)
        raise InvalidInput(f"workers are running ({names}): {then}")


# --- Restore: what it does -------------------------------------------------------------


def restore(path: Path, *, force: bool = False) -> int:
    """Replace the installation's database and artifacts with the archive's, then hold:
    returns how many operations were taken over."""
    # Beside the archive, not in the system's temporary folder (often small, or memory).
    with tempfile.TemporaryDirectory(prefix="oversight-restore-", dir=path.parent) as work:
        archive = checked(path, Path(work))
        if not force:
            refuse_while_workers_alive()
        _write_artifacts(archive)
        database_copies.replace(archive.database)
    try:
        return hold(archive)
    except OversightError as error:
        raise InvalidInput(
            f"{path} was restored, but the workers are not held ({error}): pause them "
            "now with manage.py pause_workers, then check"
        ) from None


def _write_artifacts(archive: Checked) -> None:
    """Before the database that names them; read and checked again as they are written."""
    with tarfile.open(archive.path, mode="r:") as tar:
        for artifact in archive.manifest["artifacts"]:
            content = _read(tar, ARTIFACTS + artifact["sha256"], archive.path)
            if hashlib.sha256(content).hexdigest() != artifact["sha256"]:
                raise InvalidInput(f"{archive.path} changed while it was being restored")
            artifact_store.save(artifact["sha256"], content)


@transaction.atomic
def hold(archive: Checked) -> int:
    """Pause every worker, and take over each operation that may have fired after the
    backup, in one transaction, just after the database was replaced. An operation a
    worker still running (``--force``) changed in that moment is left to it, logged."""
    now = timezone.now().isoformat(timespec="seconds")
    if WorkerPause.objects.filter(lane=WorkerPause.EVERY_LANE).exists():
        resume_workers(actor=RESTORE)  # The backup's own pause, replaced by this one's.
    pause_workers(
        lane=WorkerPause.EVERY_LANE,
        actor=RESTORE,
        # The archive's name, not its folder: the reason is shown to every member.
        reason=f"restored from {archive.path.name} at {now}: check, then resume with "
        "manage.py resume_workers --as ADMIN",
    )
    taken_at = archive.manifest["taken_at"]
    operations = Operation.objects.filter(
        executor=Operation.Executor.SERVER, status__in=MAY_HAVE_FIRED
    ).order_by("pk")
    taken = 0
    for operation in operations:
        try:
            _take_over(operation, taken_at)
            taken += 1
        except StaleVersion:  # A worker still running (--force) took it meanwhile.
            log.warning("restore: operation %s changed while it was being held", operation.pk)
    return taken


def _take_over(operation: Operation, taken_at: str) -> None:
    """As after a lost lease: in flight with an expired lease, so that its next claim is
    a takeover, which verifies first. One without an intent gets the restore's, which
    says that nothing was captured before the effect (``NOTHING_CAPTURED``)."""
    changes = (
        {} if operation.status == Operation.Status.PROPOSED else {"lease_expires_at": db_now()}
    )
    if operation.intent is None:
        changes["intent"] = {NOTHING_CAPTURED: {"backup_taken_at": taken_at}}
    if operation.status == Operation.Status.APPROVED:
        changes["lease_owner"] = "restore"
    transition_operation(
        operation=operation,
        # One waiting for a decision waits still; its intent makes its first claim,
        # once approved again, verify first too.
        to=Operation.Status.IN_FLIGHT
        if operation.status == Operation.Status.APPROVED
        else operation.status,
        actor=RESTORE,
        reason=f"restored from a backup taken at {taken_at}: it may have fired since, so "
        "it is verified before anything fires",
        event=RESTORED,
        changes=changes,
        detail={"restored": {"backup_taken_at": taken_at, "status_then": operation.status}},
    )
