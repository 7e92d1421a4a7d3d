"""Which folder is ``file.write``'s workspace when workers run on several machines.

A file one worker writes may be verified, undone or written over by another: every
worker must see the same workspace (``OVERSIGHT_WORKSPACE`` on a shared volume). The
first worker to start marks its workspace (``.oversight-workspace``, a random name) and
records the mark in the database; every worker then compares its own workspace's mark
with the recorded one, as it starts, at each heartbeat, and before each write. A worker
whose workspace carries no mark or another one (a host where the shared volume is not
mounted, or that has a folder of its own) claims no ``file.write`` and says why, in its
log and on ``/healthz``; the workers that see the shared workspace take them. Files are
never written to a folder the other workers do not see.

Moving the workspace: copy the folder with its mark. A workspace lost for good:
``manage.py adopt_workspace`` records this machine's instead.
"""

import secrets
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction

from runs.durable_files import write_durably
from runs.models import SharedWorkspace

MARK = ".oversight-workspace"
# The actions whose effects are files in the workspace.
ACTIONS = frozenset({"file.write"})


def workspace_root() -> Path:
    """The folder holding every project's workspace."""
    return Path(settings.OVERSIGHT_WORKSPACE).resolve()


class NotShared(Exception):
    """This worker's workspace is not the shared one."""


def mark_of(root: Path) -> str:
    """The mark of the workspace at ``root``, or "" if it has none."""
    try:
        return (root / MARK).read_text().strip()
    except FileNotFoundError:
        return ""


def marked(root: Path) -> str:
    """The mark of the workspace at ``root``, made first if it has none (two workers
    making one at once on a shared volume end with the same: the first link wins)."""
    if mine := mark_of(root):
        return mine
    staged = root / f"{MARK}.{secrets.token_hex(8)}"
    write_durably(staged, secrets.token_hex(16).encode())
    try:
        (root / MARK).hardlink_to(staged)
    except FileExistsError:
        pass
    finally:
        staged.unlink()
    return mark_of(root)


def refusal(worker: str) -> str:
    """Why this machine's workspace is not the shared one, in one line for the log and
    the heartbeat; "" if it is (marked and recorded by the first worker to ask)."""
    root = workspace_root()
    shared = SharedWorkspace.objects.filter(pk=SharedWorkspace.ROW).first()
    try:
        if shared is None:
            root.mkdir(parents=True, exist_ok=True)
            shared = record(marked(root), worker)
        mine = mark_of(root)
    except OSError as error:
        return f"file.write refused: the workspace {root} cannot be read or marked: {error}"
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
    """Before a write: ``NotShared`` unless this workspace is the shared one (the
    attempt fails and is retried, by a worker that sees it)."""
    if why := refusal(worker):
        raise NotShared(why)
