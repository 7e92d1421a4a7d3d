"""``file.write``: write a text file inside the project's sandboxed workspace.

Each project has its own workspace, ``<OVERSIGHT_WORKSPACE>/project-<id>``: a path is
always read inside the operation's project, so no agent can see, hash or overwrite
another project's files. Precondition: the file's current content still has the sha256
the reviewer approved against (``null``: the file must not exist yet). No path may
leave the workspace (absolute paths, ``..`` and symlinks leading out are refused).
The previous version is kept as an artifact before the write, so the in-band undo
restores it exactly (or removes a file that did not exist). Messages name the file by
the path the agent gave, never by its place on the server.

Fencing reaches the file: every writer holds an exclusive lock on the file's folder
from its re-hash to its atomic replace, and confirms its lease inside that lock;
verification reads under a shared lock. A worker paused mid-write is waited for, never
raced, and one paused before its lock finds its lease gone and writes nothing. So a
repeat after a takeover is harmless (``deduplicates``), and "absent" is final.
"""

import fcntl
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

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
from runs.actions.previews import FileChange, file_change
from runs.canonical import sha256_hex
from runs.models import Artifact, Checkpoint, Operation, Project
from runs.services.artifacts import INCOMING, read_artifact, store_artifact, write_durably

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
        if pure.name.startswith(INCOMING):
            raise ValueError(f"names starting with {INCOMING!r} are Oversight's temporary files")
        return path


def workspace_root() -> Path:
    """The folder holding every project's workspace."""
    return Path(settings.OVERSIGHT_WORKSPACE).resolve()


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


class FolderBusy(TryLater):
    """Another writer held the folder's lock for too long: try again later."""


@contextmanager
def folder_lock(folder: Path, *, shared: bool = False, wait: bool = True) -> Iterator[None]:
    """Hold ``folder``'s lock (exclusive for writers, shared for readers), waiting at
    most a lease's length (or not at all). A folder that does not exist holds nothing to wait for: a
    writer creating it must still take the lock and confirm its lease before writing."""
    if not folder.is_dir():
        yield
        return
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        deadline = time.monotonic() + settings.OVERSIGHT_LEASE_SECONDS
        mode = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
        while True:
            try:
                fcntl.flock(fd, mode)
                break
            except BlockingIOError:
                if not wait or time.monotonic() > deadline:
                    raise FolderBusy("the folder stayed locked by another writer") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # Releases the lock.


def clear_leftovers() -> int:
    """Remove what killed writers left in the workspaces (``.incoming-*``), folder by
    folder under the folder's lock (skipping a folder someone is writing in now): a
    live writer holds the lock while its temporary file exists. Returns how many."""
    removed = 0
    leftovers = workspace_root().rglob(f"{INCOMING}*")
    for folder in sorted({leftover.parent for leftover in leftovers}):
        try:
            with folder_lock(folder, wait=False):
                removed += _remove_incoming(folder)
        except FolderBusy:
            continue
    return removed


def _remove_incoming(folder: Path) -> int:
    leftovers = list(folder.glob(f"{INCOMING}*"))
    for leftover in leftovers:
        leftover.unlink(missing_ok=True)
    return len(leftovers)


def write_locked(
    path: str, target: Path, content: bytes, *, before: str | None, ctx: Context
) -> None:
    """Replace ``target`` (``path`` in the workspace) with ``content`` only if it still
    hashes to ``before``, under the folder's lock and the worker's confirmed lease.
    Temporary files left by killed writers of this folder are removed on the way: no
    live writer can own one while we hold the lock."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:  # Nothing of the file was written.
        raise not_written(path, error, "its folder could not be made") from None
    with folder_lock(target.parent):
        _remove_incoming(target.parent)
        found = current_hash(target)
        if found != before:
            raise NotApplied(f"{path} changed since it was approved")
        ctx.confirm_lease()
        try:
            write_durably(target, content)
        except OSError as error:  # Nothing was replaced: the rename is all or nothing.
            raise not_written(path, error) from None


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
        content = args.content.encode()
        target = resolve(args.path, ctx.project)
        with on_disk(args.path, "written"):
            write_locked(args.path, target, content, before=args.expected_sha256, ctx=ctx)
        return {"path": args.path, "sha256": sha256_hex(content)}

    def verify(self, args: FileWriteArguments, key: str, ctx: Context) -> Effect:
        target = resolve(args.path, ctx.project)
        with on_disk(args.path, "read"), folder_lock(target.parent, shared=True):
            found = current_hash(target)
        ours = sha256_hex(args.content.encode())
        if found == ours:
            return Effect.APPLIED
        if found == args.expected_sha256:
            return Effect.ABSENT
        return Effect.APPLIED if _built_upon(args.path, ours, ctx) else Effect.UNCERTAIN

    def undo(self, args: FileWriteArguments, key: str, ctx: Context) -> None:
        """Put the file back as the reviewer approved against: its previous version (an
        absolute state, so repeating it is harmless), or no file — unless the version
        there now is another approved operation's, which restoring would discard."""
        target = resolve(args.path, ctx.project)
        previous = ctx.intent.get("previous")
        with on_disk(args.path, "restored"), folder_lock(target.parent):
            found = current_hash(target)
            if found == previous:
                return
            if _approved_writes(args.path, ctx).filter(intent__writes=found).exists():
                raise NothingToRollBack(f"{args.path} holds another approved operation's write")
            ctx.confirm_lease()
            if previous is None:
                target.unlink(missing_ok=True)
            else:
                write_durably(target, read_artifact(Artifact.objects.get(sha256=previous)))
            if current_hash(target) != previous:
                raise ExecutionFailed(f"{args.path} could not be restored to {previous}")
