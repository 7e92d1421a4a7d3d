"""Artifacts: content-addressed blobs, stored durably before anything references them.

Order matters (seed 000): bytes in the store (``runs.artifact_store``) → ``Artifact``
row → checkpoint reference. A crash, or the store's outage, leaves at worst an
unreferenced blob, which ``collect_orphan_artifacts`` removes later; never a reference
to missing bytes.
"""

import re
import unicodedata
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import ProtectedError
from django.utils import timezone

from runs import artifact_store
from runs.actors import Actor
from runs.canonical import sha256_hex
from runs.errors import InvalidInput
from runs.models import Artifact, Run
from runs.services.runs import require_open
from runs.transitions import ArtifactRef, record_run_event


def store_artifact(content: bytes) -> Artifact:
    """Write ``content`` to durable storage and record it (once per distinct content)."""
    if len(content) > settings.OVERSIGHT_ARTIFACT_MAX_BYTES:
        raise InvalidInput(
            f"content: {len(content)} bytes is over the limit of "
            f"{settings.OVERSIGHT_ARTIFACT_MAX_BYTES}"
        )
    digest = sha256_hex(content)
    # Written whether or not the blob exists: blobs are shared between projects, and
    # an upload that returned sooner for known bytes would tell an agent that another
    # project stored them. Rewriting the same bytes is harmless (atomic replace).
    artifact_store.save(digest, content)
    artifact, created = Artifact.objects.get_or_create(
        sha256=digest, defaults={"size": len(content)}
    )
    if not created:
        # Restart the orphan grace period: a reference to it may be about to be written.
        Artifact.objects.filter(pk=artifact.pk).update(stored_at=timezone.now())
    return artifact


# RFC 6838's type/subtype (restricted-name), without parameters.
MEDIA_TYPE = r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*$"
MEDIA_TYPE_MAX = 100


def media_type_of(value: str) -> str:
    """``value`` as the lowercase ``type/subtype`` stored on a reference; ``InvalidInput``
    for anything else (a line break in it would break every download's header)."""
    if len(value) > MEDIA_TYPE_MAX or not re.fullmatch(MEDIA_TYPE, value):
        raise InvalidInput(
            f"media_type: not a type/subtype such as text/plain (at most {MEDIA_TYPE_MAX} "
            "characters, no parameters)"
        )
    return value.lower()


def check_name(name: str) -> None:
    """An artifact's name: shown on pages and used as a download's file name, so no
    control or invisible formatting characters (line breaks, bidi overrides)."""
    if not name.strip() or len(name) > 500:
        raise InvalidInput("name: 1 to 500 characters")
    if any(unicodedata.category(c) in ("Cc", "Cf", "Cs") for c in name):
        raise InvalidInput("name: control or formatting characters are not allowed")


def attach_artifact(
    *, run: Run, name: str, content: bytes, actor: Actor, media_type: str = "text/plain"
) -> Artifact:
    """Store a new version of the run's artifact ``name`` and checkpoint the reference,
    which carries its media type (the blob is shared; the type is this run's say)."""
    check_name(name)
    media_type = media_type_of(media_type)
    require_open(run)
    artifact = store_artifact(content)
    record_run_event(
        run=run,
        actor=actor,
        event="artifact.attached",
        reason=name,
        artifacts=[ArtifactRef(name, artifact, media_type)],
    )
    return artifact


def read_artifact(artifact: Artifact) -> bytes:
    """The artifact's bytes, checked against its sha256 (``ArtifactMissing``,
    ``ArtifactDamaged`` or ``StoreUnavailable`` otherwise)."""
    return artifact_store.read(artifact.sha256)


def collect_orphan_artifacts(*, older_than: timedelta, now: datetime | None = None) -> list[str]:
    """Remove blobs that no checkpoint references and that were stored before the grace
    period; returns their hashes. A referenced blob is never removed: the row is
    deleted only if no reference exists in the same transaction, and a reference
    written concurrently fails its foreign key instead of pointing at nothing."""
    cutoff = (now or timezone.now()) - older_than
    removed = []
    for artifact in Artifact.objects.filter(refs__isnull=True, stored_at__lt=cutoff).iterator():
        try:
            with transaction.atomic():
                deleted, _ = Artifact.objects.filter(
                    pk=artifact.pk, refs__isnull=True, stored_at__lt=cutoff
                ).delete()
        except (ProtectedError, IntegrityError):
            continue  # Referenced in the meantime: keep it.
        if deleted:
            artifact_store.delete(artifact_store.name_of(artifact.sha256))
            removed.append(artifact.sha256)
    known = set(Artifact.objects.values_list("sha256", flat=True))
    for name, written in list(artifact_store.listed()):
        sha256 = name.rsplit("/", 1)[-1]
        if sha256 not in known and written < cutoff:
            artifact_store.delete(name)
            removed.append(sha256)
    return removed
