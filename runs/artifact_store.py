"""The artifact store: each artifact's bytes, named by their sha256, behind Django's
storage API (``STORAGES["artifacts"]``).

The embedded default is a local folder (``OVERSIGHT_ARTIFACT_ROOT``), each blob written
whole and fsynced (``DurableFileSystemStorage``). On several machines without a shared
disk it is an object store: ``OVERSIGHT_ARTIFACT_STORE=s3://bucket/prefix?…`` names an
S3-compatible one (django-storages' S3 backend), and a settings module may name any
other django-storages backend in ``STORAGES["artifacts"]``.

Whatever the backend, a blob is whole or absent (a rename into place, an object
store's PUT), its bytes are checked against their sha256 whenever they are read, and a
store that cannot be reached raises ``StoreUnavailable`` (an ``OSError``, as a full
disk would): the caller's transaction and the engine's retries treat it alike.
"""

import hashlib
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

from django.conf import settings
from django.core.files.base import ContentFile, File
from django.core.files.storage import FileSystemStorage, Storage, storages

from runs.durable_files import write_durably

CHUNK = 1 << 20
# Bytes kept in memory while a read is checked, before it spills to a temporary file.
IN_MEMORY = 1 << 20


class StoreUnavailable(OSError):
    """The store did not answer, or refused: its outage, not a missing blob."""


class ArtifactMissing(FileNotFoundError):
    """No blob under that sha256."""


class ArtifactDamaged(OSError):
    """The stored bytes no longer hash to the sha256 they are stored under."""


class DurableFileSystemStorage(FileSystemStorage):
    """A local folder whose files are written as ``write_durably`` writes them: a
    temporary file fsynced, renamed into place, the folder fsynced; a blob written
    again replaces itself. Its folder is ``OVERSIGHT_ARTIFACT_ROOT`` as the setting is
    now (read at each use, so that a test or a rehearsal may point it elsewhere)."""

    def __init__(self, location: str | None = None, **options) -> None:
        super().__init__(location=location, allow_overwrite=True, **options)

    @property
    def base_location(self) -> str:
        return str(self._location or settings.OVERSIGHT_ARTIFACT_ROOT)

    @property
    def location(self) -> str:
        return str(Path(self.base_location).resolve())

    def _save(self, name: str, content: File) -> str:
        content.seek(0)
        write_durably(Path(self.path(name)), content.read())
        return name


def storage() -> Storage:
    return storages["artifacts"]


def name_of(sha256: str) -> str:
    return f"{sha256[:2]}/{sha256}"


@contextmanager
def reaching() -> Iterator[None]:
    """A remote store's every failure (refused, timed out, an error answered) as its
    outage; a missing file as it is, and the local folder's own errors (a full disk)
    too."""
    try:
        yield
    except (FileNotFoundError, StoreUnavailable):
        raise
    except Exception as error:
        if isinstance(error, OSError) and isinstance(storage(), FileSystemStorage):
            raise
        raise StoreUnavailable(f"the artifact store did not answer: {error}") from error


def save(sha256: str, content: bytes) -> None:
    """Store ``content`` under ``sha256`` (its hash), whole or not at all."""
    with reaching():
        saved = storage().save(name_of(sha256), ContentFile(content))
    if saved != name_of(sha256):  # A backend that keeps both under another name.
        raise StoreUnavailable(
            f"the artifact store kept {sha256} as {saved}: it must replace, not rename"
        )


def exists(sha256: str) -> bool:
    with reaching():
        return storage().exists(name_of(sha256))


def size(sha256: str) -> int:
    with reaching():
        try:
            return storage().size(name_of(sha256))
        except FileNotFoundError:
            raise ArtifactMissing(f"artifact {sha256} is missing from the store") from None


def _chunks(sha256: str) -> Iterator[bytes]:
    with reaching():
        try:
            stored = storage().open(name_of(sha256), "rb")
        except FileNotFoundError:
            raise ArtifactMissing(f"artifact {sha256} is missing from the store") from None
        with stored:
            while chunk := stored.read(CHUNK):
                yield chunk


def checked(sha256: str) -> tempfile.SpooledTemporaryFile:
    """The blob's bytes in a temporary file (spilling to disk past a MiB), rewound, once
    they were read whole and found to hash to ``sha256``: nothing of a damaged blob is
    ever handed on, and a download streams from here."""
    copy = tempfile.SpooledTemporaryFile(max_size=IN_MEMORY)  # noqa: SIM115 (returned)
    digest = hashlib.sha256()
    try:
        for chunk in _chunks(sha256):
            digest.update(chunk)
            copy.write(chunk)
        if digest.hexdigest() != sha256:
            raise ArtifactDamaged(f"artifact {sha256} in the store no longer has its sha256")
    except BaseException:
        copy.close()
        raise
    copy.seek(0)
    return copy


def read(sha256: str) -> bytes:
    """The blob's bytes, checked against ``sha256``."""
    with checked(sha256) as copy:
        return copy.read()


def digest_as_stored(sha256: str) -> str:
    """The sha256 of the blob's bytes as they are (``sha256`` itself unless damaged),
    read a chunk at a time."""
    digest = hashlib.sha256()
    for chunk in _chunks(sha256):
        digest.update(chunk)
    return digest.hexdigest()


def copy_as_stored(sha256: str, into: BinaryIO) -> None:
    """Write the blob's bytes as they are into ``into``, a chunk at a time."""
    for chunk in _chunks(sha256):
        into.write(chunk)


def read_as_stored(sha256: str) -> bytes:
    """The blob's bytes as they are, damaged or not: for evidence, which reports a
    damaged blob rather than withholding it."""
    return b"".join(_chunks(sha256))


def delete(name: str) -> None:
    """Remove a stored file by its name in the store (``name_of``, or as listed)."""
    with reaching():
        storage().delete(name)


def listed() -> Iterator[tuple[str, datetime]]:
    """Every file in the store's folders of blobs (two hex digits), blobs and a killed
    writer's leftovers alike, as its name in the store and when it was last written;
    nothing before the first blob is stored."""
    store = storage()
    with reaching():
        try:
            prefixes, _ = store.listdir("")
        except FileNotFoundError:
            return
        for prefix in prefixes:
            if not re.fullmatch(r"[0-9a-f]{2}", prefix):
                continue
            for name in store.listdir(prefix)[1]:
                yield f"{prefix}/{name}", store.get_modified_time(f"{prefix}/{name}")
