"""Files written so that a crash leaves the old version or the new one, never half: the
local artifact store, backups and archives, and ``file.write``'s workspace."""

import hashlib
import os
import tempfile
from pathlib import Path

# The prefix of a file being written; a killed writer leaves one behind.
INCOMING = ".incoming-"


def write_durably(path: Path, content: bytes, *, prefix: str = INCOMING) -> None:
    """Replace ``path`` with ``content`` all at once, durably: a temp file (named
    ``prefix``…) in the same folder, fsync, atomic rename, fsync the folder. Readers see
    old or new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=prefix)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    sync_folder(path.parent)


def sync_folder(folder: Path) -> None:
    """Make a rename or a new name in ``folder`` durable (fsync of the folder itself)."""
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def file_sha256(path: Path) -> str:
    """The sha256 of a file of any size, read a MiB at a time."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
