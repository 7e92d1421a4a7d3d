"""Which folder is ``file.write``'s workspace when workers run on several machines.

A file one worker writes may be verified, undone or written over by another: every
worker must see the same workspace (``OVERSIGHT_WORKSPACE`` on a shared volume). Its
mark (``.oversight-workspace``, a random name) is recorded in the database, and every
worker compares its own workspace's mark with the recorded one: at each heartbeat,
when it takes up an operation of these actions, and again just before it writes. A
worker whose workspace carries no mark or another one (a host where the shared volume
is not mounted, or that has a folder of its own) hands such an operation back without
counting an attempt, claims no more of them, and says why, in its log and on
``/healthz``; the workers that see the shared workspace take them.

The first worker marks and records its workspace by itself only where that cannot
be the wrong folder: no ``file.write`` was ever committed, or the folder already holds
a project's files. Otherwise (an installation upgraded to this release), and when the
marked workspace is lost for good, ``manage.py adopt_workspace`` records the folder of
the machine it runs on.
"""

import os
import re
import secrets
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction

from runs.actions.base import TryLater
from runs.durable_files import sync_folder, write_durably
from runs.models import Operation, SharedWorkspace

MARK = ".oversight-workspace"
# The actions whose effects are files in the workspace.
ACTIONS = frozenset({"file.write"})
VALID_MARK = re.compile(r"[0-9a-f]{32}")


def workspace_root() -> Path:
    """The folder holding every project's workspace."""
    return Path(settings.OVERSIGHT_WORKSPACE).resolve()


class NotShared(TryLater):
    """This worker's workspace is not the shared one: nothing was written, and the
    operation is handed back for a worker that sees the shared one."""


def mark_of(root: Path) -> str:
    """The mark of the workspace at ``root``, or "" if it has none (or not a valid one:
    an empty mark would match every folder without one)."""
    try:
        mark = (root / MARK).read_text(errors="replace").strip()
    except FileNotFoundError:
        return ""
    return mark if VALID_MARK.fullmatch(mark) else ""


def marked(root: Path) -> str:
    """The mark of the workspace at ``root``, made first if it has none. Whole or
    absent, and durable: staged under a name of its own (which the sweep of killed
    writers' files leaves alone), then linked into place, so that two workers making
    one at once on a shared volume end with the first one's; where the file system has
    no hard links, created exclusively instead."""
    if mine := mark_of(root):
        return mine
    made = secrets.token_hex(16)
    staged = root / f"{MARK}.{secrets.token_hex(8)}"
    write_durably(staged, made.encode(), prefix=f"{MARK}.")
    try:
        (root / MARK).hardlink_to(staged)
    except FileExistsError:
        pass
    except OSError:  # No hard links here (some network and FUSE file systems).
        _create_exclusively(root / MARK, made)
    finally:
        staged.unlink(missing_ok=True)
    sync_folder(root)
    return mark_of(root)


def _create_exclusively(path: Path, mark: str) -> None:
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return
    with os.fdopen(descriptor, "w") as handle:
        handle.write(mark)
        handle.flush()
        os.fsync(handle.fileno())


def refusal(worker: str) -> str:
    """Why this machine's workspace is not the shared one, in one line for the log and
    the heartbeat; "" if it is."""
    root = workspace_root()
    try:
        shared = SharedWorkspace.objects.filter(pk=SharedWorkspace.ROW).first()
        if shared is None:
            if not _may_mark(root):
                return (
                    f"file.write refused: no shared workspace is recorded yet, and {root} "
                    "holds no project's files: run manage.py adopt_workspace where the "
                    "shared one is mounted"
                )
            root.mkdir(parents=True, exist_ok=True)
            shared = record(marked(root), worker)
        mine = mark_of(root)
    except Exception as error:  # A heartbeat must still be written: refuse meanwhile.
        return f"file.write refused: the workspace {root} cannot be checked: {error}"
    if mine == shared.mark:
        return ""
    if not mine:
        return (
            f"file.write refused: the workspace {root} has no mark; the shared one "
            f"({shared.mark[:8]}) is not there (is its volume mounted?)"
        )
    return (
        f"file.write refused: the workspace {root} is {mine[:8]}, not the shared one "
        f"({shared.mark[:8]}): another folder"
    )


def _may_mark(root: Path) -> bool:
    """Whether the first worker may take its workspace for the shared one by itself:
    no write was ever committed, or this one holds a project's files. Asked until a
    mark is recorded, so once per installation: no index serves it."""
    committed = Operation.objects.filter(status=Operation.Status.COMMITTED, action__in=ACTIONS)
    if not committed.exists():
        return True
    return root.is_dir() and any(root.glob("project-*"))


def record(mark: str, worker: str) -> SharedWorkspace:
    """The recorded mark: ``mark``, unless another worker recorded one first."""
    try:
        with transaction.atomic():
            return SharedWorkspace.objects.create(mark=mark, recorded_by=worker)
    except IntegrityError:
        return SharedWorkspace.objects.get(pk=SharedWorkspace.ROW)


def adopt(by: str) -> str:
    """Record this machine's workspace as the shared one (marking it first); returns
    its mark. Workers take it at their next heartbeat: those that see this folder run
    file.write from then on, the others stop."""
    root = workspace_root()
    root.mkdir(parents=True, exist_ok=True)
    mark = marked(root)
    SharedWorkspace.objects.update_or_create(
        pk=SharedWorkspace.ROW, defaults={"mark": mark, "recorded_by": by}
    )
    return mark


def require_shared(worker: str) -> None:
    """``NotShared`` unless this workspace is the shared one."""
    if why := refusal(worker):
        raise NotShared(why)
