"""``file.write``: write a text file inside the project's sandboxed workspace.

Each project has its own workspace, ``<OVERSIGHT_WORKSPACE>/project-<id>``: a path is
always read inside the operation's project, so no agent can see, hash or overwrite
another project's files. Precondition: the file's current content still has the sha256
the reviewer approved against (``null``: the file must not exist yet). No path may
leave the workspace (absolute paths, ``..`` and symlinks leading out are refused).
The previous version is kept as an artifact before the write, so the in-band undo
restores it exactly (or removes a file that did not exist) — but only over this
operation's own write: any other content there is someone's work, left for a person.
Messages name the file by the path the agent gave, never by its place on the server.

Fencing reaches the file, and a stopped worker holds a folder up no longer than its
lease. A folder's lock is the folder ``.incoming-lock`` in it, holding one entry named
after its holder: the operation and fencing epoch of its attempt, and a random token. A
writer first stages: it makes ``.incoming-<holder>/<holder>/`` with the new content
written and synced in it, and ``flock``s the staging folder for as long as its process
lives. It takes the lock by renaming the staging folder to ``.incoming-lock``, which
succeeds only where there is none or an empty one, so the lock names its holder from
the instant it is held. Holding it, the writer re-hashes the file, confirms its lease,
and moves the content from its entry onto the file (a removal moves the file into the
entry): all a holder changes in the folder passes through its entry, so once the entry
is gone nothing of it can land.

A writer that finds the lock held waits (a lease's length at most, then ``FolderBusy``:
tried later) while the holder may still land something: while its process lives and its
attempt's lease holds, in the database's clock (a holder naming no attempt: while its
process lives; the housekeeping sweep, whose removals pass through its entry too: not
at all). Then it removes the holder's entry, staged content and all, and takes the
lock. A holder stopped after its confirm has either landed its write before that, where
the next holder's re-hash and verification see it, or finds its entry gone and writes
nothing (``LeaseLost``: a takeover decides); one stopped before its confirm finds its
lease gone. An entry is removed by its holder's unique name, never as "whatever holds
the lock": two waiters breaking one holder, or one breaking a holder that has just
left, cannot remove the next holder's — as rotating a shared lock file could; and a
lock file whose holder writes its name after locking it could be found held by nobody
known. Verification reads under the same lock, so a repeat after a takeover is harmless
(``deduplicates``) and "absent" is final. A staging folder whose writer's process is
gone is removed by the next writer or the sweep, holding its ``flock`` shared: a writer
that finds its own so taken, between making and locking it, stages anew.
"""

import errno
import fcntl
import logging
import os
import re
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path, PurePosixPath
from typing import NoReturn

from django.conf import settings
from django.db.models import Max
from pydantic import Field, field_validator

from runs.actions.base import (
    Action,
    Arguments,
    Context,
    Effect,
    ExecutionFailed,
    NotApplied,
    NothingToRollBack,
    PreconditionFailed,
    TryLater,
    plain_reason,
)
from runs.actions.previews import FileChange, Together, file_change
from runs.artifact_store import StoreUnavailable
from runs.canonical import sha256_hex
from runs.clock import db_now
from runs.durable_files import INCOMING, sync_folder
from runs.models import Artifact, Checkpoint, Operation, Project
from runs.models.operations import LEASED
from runs.services.artifacts import read_artifact, store_artifact
from runs.shared_workspace import require_shared, workspace_root

log = logging.getLogger(__name__)
MAX_CONTENT = 1_000_000
NAME_MAX = 255  # bytes in one path component (Linux)


class FileWriteArguments(Arguments):
    path: str = Field(min_length=1, max_length=500)
    content: str = Field(max_length=MAX_CONTENT)
    expected_sha256: str | None = Field(pattern=r"^[0-9a-f]{64}$")

    @field_validator("path")
    @classmethod
    def stays_inside(cls, path: str) -> str:
        pure = PurePosixPath(path)
        if pure.is_absolute() or ".." in pure.parts or "\\" in path or "\x00" in path:
            raise ValueError("must be a relative path inside the workspace, without '..'")
        if any(len(part.encode()) > NAME_MAX for part in pure.parts):
            raise ValueError(f"each folder or file name must be at most {NAME_MAX} bytes")
        if any(part.startswith(INCOMING) for part in pure.parts):
            raise ValueError(
                f"names starting with {INCOMING!r} are Oversight's temporary files and locks"
            )
        return path


def workspace_of(project: Project) -> Path:
    """``project``'s own workspace. Named by the project's id, which is never changed or
    reused: a slug can be edited, and a project later given the old slug would then
    find the files of another."""
    return workspace_root() / f"project-{project.pk}"


def resolve(path: str, project: Project) -> Path:
    """The real location of ``path`` in ``project``'s workspace; refuses anything (e.g.
    a symlink) leading outside it, into another project's workspace or elsewhere."""
    root = workspace_of(project)
    target = (root / path).resolve()
    if not target.is_relative_to(root) or target == root:
        raise PreconditionFailed(f"{path} leads outside the workspace")
    return target


@contextmanager
def on_disk(path: str, doing: str) -> Iterator[None]:
    """Report a failure of the file system on ``path`` in the agent's terms: the path as
    the agent gave it and the system's fixed words for the error. The error's own text
    names the absolute server path: it goes to the server log only."""
    try:
        yield
    except OSError as error:
        log.warning("file.write: %s could not be %s: %s", path, doing, error)
        raise ExecutionFailed(f"{path} could not be {doing}: {plain_reason(error)}") from None


def current_hash(target: Path) -> str | None:
    return sha256_hex(target.read_bytes()) if target.is_file() else None


LOCK = f"{INCOMING}lock"  # A folder's lock (see above): a folder holding its holder's entry.
CONTENT = "content"  # In a holder's entry: what it puts in place of the file.
REMOVED = "removed"  # In a holder's entry: the file it removes, on its way out.
# A holder's name: the operation and fencing epoch of its attempt, then a random token;
# the housekeeping sweep's starts with SWEEP instead.
ATTEMPT = re.compile(r"(\d+)-(\d+)-[0-9a-f]+")
SWEEP = "sweep-"
POLL_SECONDS = 0.05


class FolderBusy(TryLater):
    """Another writer held the folder's lock for too long: try again later."""


class FolderLock:
    """One holder of ``folder``'s lock: its staging folder, then its entry in the lock,
    through which every change it makes in the folder passes (see above)."""

    def __init__(self, folder: Path, ctx: Context | None, sweep: bool = False) -> None:
        self.folder = folder
        self.ctx = ctx
        self.prefix = SWEEP if sweep else _attempt_prefix(ctx)
        self.fd: int | None = None  # The staging folder's, holding its flock.
        self._name_anew()

    def _name_anew(self) -> None:
        self.name = self.prefix + secrets.token_hex(8)
        self.staging = self.folder / f"{INCOMING}{self.name}"
        self.entry = self.folder / LOCK / self.name

    def stage(self, content: bytes | None) -> None:
        """Make the staging folder, ``flock``ed for as long as this process lives, with
        ``content`` (if any) written and synced in the entry-to-be."""
        while not self._staged(content):
            self._close()
            self._name_anew()

    def _staged(self, content: bytes | None) -> bool:
        os.mkdir(self.staging)  # No folder to write in: an error.
        try:
            self.fd = os.open(self.staging, os.O_RDONLY | os.O_DIRECTORY)
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.mkdir(self.staging / self.name)
            if content is not None:
                _write_synced(self.staging / self.name / CONTENT, content)
        except (BlockingIOError, FileNotFoundError):
            return False  # A sweep found it before it was locked, and is removing it.
        return True

    def acquire(self, wait: bool) -> None:
        """Rename the staging folder to the lock. While the lock is held, break it if its
        holder can land nothing more, else wait (at most a lease's length) or give up."""
        lock = self.folder / LOCK
        deadline = time.monotonic() + settings.OVERSIGHT_LEASE_SECONDS
        live_until: dict[str, float] = {}
        while not _renamed_to(self.staging, lock):
            if _break_stale(lock, live_until):
                continue
            if not wait or time.monotonic() > deadline:
                raise FolderBusy("the folder stayed locked by another writer")
            time.sleep(POLL_SECONDS)

    def replace(self, target: Path) -> None:
        """Put the staged content in place of ``target``, all at once."""
        try:
            os.rename(self.entry / CONTENT, target)
        except FileNotFoundError:  # Only a waiter taking the lock over removes it.
            self._taken_over()

    def remove(self, target: Path) -> None:
        """Remove ``target``, if it is there: moved into the entry, then deleted."""
        try:
            os.rename(target, self.entry / REMOVED)
        except FileNotFoundError:
            if not self.entry.is_dir():
                self._taken_over()
            return  # No file to remove.
        (self.entry / REMOVED).unlink(missing_ok=True)

    def _taken_over(self) -> NoReturn:
        """A waiter removed the entry: the lease lapsed (``LeaseLost``), or was renewed
        just as the waiter looked (try later). Either way nothing was changed."""
        if self.ctx is not None:
            self.ctx.confirm_lease()
        raise FolderBusy("another writer took the folder's lock over; nothing was changed")

    def release(self) -> None:
        """Leave the folder as it was: the entry (gone already if a waiter took the lock
        over) or the staging folder (if never renamed) removed, then the lock if empty —
        nobody holds it — and last the flock, so that nobody takes this holder for gone
        before."""
        _remove(self.entry)
        _remove(self.staging)
        with suppress(OSError):
            os.rmdir(self.folder / LOCK)
        self._close()

    def _close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # Releases the flock.
            self.fd = None


def _attempt_prefix(ctx: Context | None) -> str:
    return "" if ctx is None else f"{ctx.operation.pk}-{ctx.epoch}-"


@contextmanager
def folder_lock(
    folder: Path,
    ctx: Context | None = None,
    *,
    staged: bytes | None = None,
    wait: bool = True,
    sweep: bool = False,
) -> Iterator[FolderLock | None]:
    """Hold ``folder``'s lock as ``ctx``'s attempt (None: a holder naming none, waited for
    while its process lives; ``sweep``: the housekeeping sweep, not waited for at all),
    with ``staged`` (what a write puts) waiting in its entry; wait at most a lease's
    length for it (``wait=False``: not at all), then ``FolderBusy``. A folder that does
    not exist has nothing to read or change: None, unless staging."""
    if staged is None and not folder.is_dir():
        yield None
        return
    lock = FolderLock(folder, ctx, sweep)
    try:
        lock.stage(staged)
        lock.acquire(wait)
        yield lock
    finally:
        lock.release()


def _renamed_to(staging: Path, lock: Path) -> bool:
    """Rename ``staging`` to ``lock`` if there is none or an empty one (False: held)."""
    try:
        os.rename(staging, lock)
    except OSError as error:
        if error.errno in (errno.ENOTEMPTY, errno.EEXIST):
            return False
        raise
    return True


def _break_stale(lock: Path, live_until: dict[str, float]) -> bool:
    """Whether ``lock`` may be free now: it holds no entry, or only entries of holders
    that can land nothing more, which this removes. ``live_until``: when to ask again
    about each holder whose lease held."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return True
    try:  # The entries, and whether the process that renamed this folder here lives.
        holders = os.listdir(fd)
        gone = _unlocked(fd)
    finally:
        os.close(fd)
    reasons = [_why_stale(holder, gone, live_until) for holder in holders]
    if None in reasons:
        return False
    for holder, why in zip(holders, reasons, strict=True):
        log.warning("file.write: broke the lock of %s held by %s: %s", lock.parent, holder, why)
        _remove(lock / holder)
    return True


def _unlocked(fd: int) -> bool:
    """Whether no process holds ``fd``'s flock (its holder is gone); if so, takes it
    shared until ``fd`` is closed."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _why_stale(holder: str, gone: bool, live_until: dict[str, float]) -> str | None:
    """Why ``holder`` can land nothing more, or None while it may: a holder naming no
    attempt, while its process lives; an attempt, while its lease holds too (asked again
    once the time it had left has passed). The sweep lands nothing outside its entry."""
    if gone:
        return "its process is gone"
    if holder.startswith(SWEEP):
        return "it is the housekeeping sweep"
    attempt = ATTEMPT.fullmatch(holder)
    if attempt is None:
        return None
    if time.monotonic() >= live_until.get(holder, 0.0):
        left = _lease_left(int(attempt[1]), int(attempt[2]))
        live_until[holder] = time.monotonic() + left
    return None if time.monotonic() < live_until[holder] else "its lease lapsed"


def _lease_left(operation_id: int, epoch: int) -> float:
    """Seconds left of the lease the operation's ``epoch`` holds, in the database's clock;
    none (0 or less) once it lapsed, was taken over or ended — for good, as a lease is
    renewed only while it holds (``Lease.renew``)."""
    expires = (
        Operation.objects.filter(pk=operation_id, fencing_epoch=epoch, status__in=LEASED)
        .values_list("lease_expires_at", flat=True)
        .first()
    )
    return (expires - db_now()).total_seconds() if expires else 0.0


def _remove(path: Path) -> None:
    """Remove ``path``, a file or a folder of them (an entry, a staging folder), again
    while its holder, waking, moves something into it; what is gone is no error."""
    while True:
        try:
            for child in path.iterdir():
                _remove(child)
            path.rmdir()
            return
        except NotADirectoryError:
            path.unlink(missing_ok=True)
            return
        except FileNotFoundError:
            return
        except OSError as error:
            if error.errno != errno.ENOTEMPTY:
                raise


def _write_synced(path: Path, content: bytes) -> None:
    with open(path, "xb") as file:
        file.write(content)
        file.flush()
        os.fsync(file.fileno())


def clear_leftovers() -> int:
    """Remove what killed writers left in the workspaces (``.incoming-*``), folder by
    folder under the folder's lock, whose taking breaks a lock no holder can land
    anything under any more (skipping a folder someone is writing in now, and giving
    way to one who comes). Returns how many."""
    removed = 0
    leftovers = workspace_root().rglob(f"{INCOMING}*")
    for folder in sorted({leftover.parent for leftover in leftovers}):
        try:
            with folder_lock(folder, wait=False, sweep=True) as lock:
                removed += _remove_leftovers(lock)
        except FolderBusy:
            continue
    return removed


def _remove_leftovers(lock: FolderLock) -> int:
    """Holding ``lock``: remove the staging folders of writers whose processes are gone,
    and any file named like Oversight's own (a workspace's ``.incoming-*`` names are
    Oversight's; no writer outside the lock may use them) — through the entry, so that
    none is removed once the lock was taken over. Returns how many."""
    removed = 0
    for leftover in lock.folder.glob(f"{INCOMING}*"):
        if leftover.name == LOCK:
            continue
        if leftover.is_dir():
            removed += _remove_if_abandoned(leftover)
        else:
            lock.remove(leftover)
            removed += 1
    return removed


def _remove_if_abandoned(staging: Path) -> int:
    """Remove a staging folder whose writer's process is gone (1), never a live one's
    (0): under its flock taken shared, so that a writer between making it and locking
    it gives it up."""
    try:
        fd = os.open(staging, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return 0
    try:
        if not _unlocked(fd):
            return 0
        _remove(staging)
        return 1
    finally:
        os.close(fd)


def write_locked(
    path: str, target: Path, content: bytes, *, before: str | None, ctx: Context
) -> None:
    """Replace ``target`` (``path`` in the workspace) with ``content`` only if it still
    hashes to ``before``, under the folder's lock and the worker's confirmed lease.
    Leftovers of killed writers in this folder are removed on the way."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:  # Nothing of the file was written.
        raise not_written(path, error, "its folder could not be made") from None
    replaced = False
    try:
        with folder_lock(target.parent, ctx, staged=content) as lock:
            _remove_leftovers(lock)
            if current_hash(target) != before:
                raise NotApplied(f"{path} changed since it was approved")
            ctx.confirm_lease()
            lock.replace(target)
            replaced = True
            sync_folder(target.parent)
    except OSError as error:
        if replaced:
            raise
        raise not_written(path, error) from None  # The rename is all or nothing.


def not_written(path: str, error: OSError, step: str = "") -> NotApplied:
    """The refusal of a write that failed before it replaced anything: in the agent's
    terms, while the error's own text (naming the server's path) goes to the log."""
    log.warning("file.write: %s could not be written: %s", path, error)
    reason = f"{step} ({plain_reason(error)})" if step else plain_reason(error)
    return NotApplied(f"{path} could not be written: {reason}")


def _approved_writes(path: str, ctx: Context):
    """The other writes of ``path`` in this project that passed their precondition and
    recorded their intent: Oversight's own, approved versions of the file."""
    return Operation.objects.filter(
        project=ctx.operation.project_id,
        action=FileWrite.name,
        arguments__path=path,
        intent__isnull=False,
    ).exclude(pk=ctx.operation.pk)


def _built_upon(path: str, ours: str, ctx: Context) -> bool:
    """A later write of ``path``, approved against this write's version, found that
    version there and committed: this write happened, and an approved one replaced it.
    Later means its intent was recorded after this operation's last one."""
    ours_intent = Checkpoint.objects.filter(
        operation=ctx.operation, event="operation.intent"
    ).aggregate(last=Max("pk"))["last"]
    return (
        _approved_writes(path, ctx)
        .filter(
            arguments__expected_sha256=ours,
            status=Operation.Status.COMMITTED,
            checkpoints__event="operation.intent",
            checkpoints__pk__gt=ours_intent or 0,
        )
        .exists()
    )


def _not_ours(path: str, found: str | None, ctx: Context) -> str:
    """Why undo leaves ``path`` as it is: what is there (``found``) is not this
    operation's write, so it is someone's work."""
    if found is None:
        return f"{path} no longer exists: this operation's write is not there to undo"
    if _approved_writes(path, ctx).filter(intent__writes=found).exists():
        return f"{path} holds another approved operation's write"
    return (
        f"{path} holds content this operation did not write (sha256 {found}): "
        "restoring the previous version would discard it"
    )


def _expect(count: int) -> str:
    return "expects" if count == 1 else "expect"


class FileWrite(Action):
    name = "file.write"
    Arguments = FileWriteArguments
    rollback_kind = Operation.RollbackKind.IN_BAND
    description = (
        "Write a text file in the project's workspace; undone by restoring the previous version."
    )
    checks = (
        "The file's current content still has expected_sha256, the sha256 hex of its "
        "UTF-8 bytes (null: the file must not exist yet)."
    )

    def lane(self, arguments: dict, project_id: int) -> str:
        """The project's folder: a slow disk holds that project's writes only."""
        return f"{self.name} project {project_id}"

    def gist(self, args: FileWriteArguments) -> str:
        lines = len(args.content.splitlines())
        what = "new file" if args.expected_sha256 is None else "replaces the file"
        return f"write {args.path} ({what}, {lines} line{'' if lines == 1 else 's'})"

    def target(self, args: FileWriteArguments) -> str:
        """The file, by its path as written plainly ("./a//b.md" is "a/b.md")."""
        return f"file {PurePosixPath(args.path)}"

    def together(self, pending: list[FileWriteArguments], ctx: Context) -> Together:
        """Each write expects one version of the file and replaces it: of those expecting
        the file as it is now, only the first made can succeed (the others then find it
        changed and are refused); one expecting the version another of them writes can
        be made after it; one expecting any other version is refused as things are."""
        path = pending[0].path
        with on_disk(path, "read"):
            now = current_hash(resolve(path, ctx.project))
        written = {sha256_hex(args.content.encode()) for args in pending} - {now}
        fits = sum(args.expected_sha256 == now for args in pending)
        follows = sum(args.expected_sha256 in written for args in pending)
        stale = len(pending) - fits - follows
        said = (
            f"Of these {len(pending)} writes of {path}, this one included, {fits or 'none'} "
            f"{_expect(fits)} the file as it is now{' (absent)' if now is None else ''}"
        )
        if fits > 1:
            said += (
                ": only the first of them made can succeed, and the others will then find "
                "the file changed and be refused"
            )
        said += "."
        if follows:
            said += f" {follows} {_expect(follows)} the version another of them writes."
        if stale:
            said += f" {stale} {_expect(stale)} a version that is not there now."
        return Together(said, fits > 1 or stale > 0)

    def describe(self, args: FileWriteArguments) -> dict[str, str]:
        before = (
            f"still has sha256 {args.expected_sha256[:12]}…"
            if args.expected_sha256
            else "still does not exist"
        )
        return {
            "precondition": f"{args.path} {before}",
            "rollback": "Restore the previous version, kept as an artifact (or remove the file "
            "if it did not exist).",
        }

    def preview(self, args: FileWriteArguments, ctx: Context) -> FileChange:
        target = resolve(args.path, ctx.project)
        with on_disk(args.path, "read"):
            current = target.read_bytes() if target.is_file() else None
        return file_change(args.path, current, args.content, args.expected_sha256)

    def precondition(self, args: FileWriteArguments, ctx: Context) -> None:
        with on_disk(args.path, "read"):
            found = current_hash(resolve(args.path, ctx.project))
        if found != args.expected_sha256:
            raise PreconditionFailed(
                f"{args.path} has changed since it was approved "
                f"(sha256 {found or 'absent'}, approved against {args.expected_sha256 or 'absent'})"
            )

    def snapshot(self, args: FileWriteArguments, ctx: Context) -> dict:
        """The previous version (kept as an artifact, for undo) and the version this
        write makes (so that other operations can tell it is an approved one)."""
        target = resolve(args.path, ctx.project)
        writes = sha256_hex(args.content.encode())
        if not target.is_file():
            return {"previous": None, "writes": writes}
        with on_disk(args.path, "read"):
            previous = target.read_bytes()
        artifact = store_artifact(previous)
        ctx.artifacts[f"workspace/{args.path}@before"] = artifact
        return {"previous": artifact.sha256, "writes": writes}

    def deduplicates(self, args: FileWriteArguments) -> bool:
        return True

    def absence_is_final(self, args: FileWriteArguments) -> bool:
        return True  # A writer confirms its lease under the lock that verify waits for.

    def execute(self, args: FileWriteArguments, key: str, ctx: Context) -> dict:
        require_shared(ctx.operation.lease_owner)  # Again: the snapshot may have been long.
        content = args.content.encode()
        target = resolve(args.path, ctx.project)
        with on_disk(args.path, "written"):
            write_locked(args.path, target, content, before=args.expected_sha256, ctx=ctx)
        return {"path": args.path, "sha256": sha256_hex(content)}

    def verify(self, args: FileWriteArguments, key: str, ctx: Context) -> Effect:
        target = resolve(args.path, ctx.project)
        with on_disk(args.path, "read"), folder_lock(target.parent, ctx):
            found = current_hash(target)
        ours = sha256_hex(args.content.encode())
        if found == ours:
            return Effect.APPLIED
        if found == args.expected_sha256:
            return Effect.ABSENT
        return Effect.APPLIED if _built_upon(args.path, ours, ctx) else Effect.UNCERTAIN

    def undo(self, args: FileWriteArguments, key: str, ctx: Context) -> None:
        """Put the file back as the reviewer approved against: its previous version (an
        absolute state, so repeating it is harmless), or no file — only while what is
        there is this operation's own write. Verification fails mostly because something
        else is there: a colleague's edit, another approved operation's write, a removal.
        Restoring over it would discard their work and call it a rollback; instead
        nothing is touched and a person reconciles (``NothingToRollBack``: an alert)."""
        target = resolve(args.path, ctx.project)
        previous = ctx.intent.get("previous")
        with on_disk(args.path, "restored"):
            try:
                restored = previous and read_artifact(Artifact.objects.get(sha256=previous))
            except StoreUnavailable as error:  # Nothing touched: a later attempt retries.
                raise TryLater("the artifact store is out of reach") from error
            # Through the lock, as a write: a worker stopped mid-restore holds the folder
            # up for its lease at most, and restores nothing once it has lost it.
            with folder_lock(target.parent, ctx, staged=restored) as lock:
                found = current_hash(target)
                if found == previous:  # Also where the folder is gone (no lock): no file.
                    return
                if found != sha256_hex(args.content.encode()):
                    raise NothingToRollBack(_not_ours(args.path, found, ctx))
                ctx.confirm_lease()
                if previous is None:
                    lock.remove(target)
                else:
                    lock.replace(target)
                if current_hash(target) != previous:
                    raise ExecutionFailed(f"{args.path} could not be restored to {previous}")
