"""Artifact bytes as a download, for the pages and the API alike. An agent chose both
the bytes and their media type, so a download is always an attachment, never sniffed,
and served as its declared type only when a browser would not run that type (HTML,
SVG, XML and scripts go out as ``application/octet-stream``)."""

from django.http import FileResponse, Http404
from django.http.response import HttpResponseBase
from django.utils.http import content_disposition_header

from runs import artifact_store
from runs.models import CheckpointArtifact

SAFE_TYPES = frozenset(
    {
        "application/gzip",
        "application/json",
        "application/octet-stream",
        "application/pdf",
        "application/zip",
        "image/gif",
        "image/jpeg",
        "image/png",
        "image/webp",
        "text/csv",
        "text/plain",
    }
)


def served_type(media_type: str) -> str:
    """The declared type if it is safe to serve, else ``application/octet-stream``."""
    declared = media_type.split(";", 1)[0].strip().lower()
    return declared if declared in SAFE_TYPES else "application/octet-stream"


def download(reference: CheckpointArtifact) -> HttpResponseBase:
    """The referenced bytes, streamed once they were read whole and checked against
    their sha256: a 404 if they are missing or damaged in the store (while the store
    cannot be reached, ``StoreUnavailable`` is answered 503 as any request's is)."""
    sha256 = reference.artifact.sha256
    try:
        stored = artifact_store.checked(sha256)
    except artifact_store.ArtifactMissing:
        raise Http404("The artifact's bytes are missing from storage.") from None
    except artifact_store.ArtifactDamaged:
        raise Http404("The artifact's bytes in storage no longer match their sha256.") from None
    return attachment(FileResponse(stored), reference)


def attachment(response: HttpResponseBase, reference: CheckpointArtifact) -> HttpResponseBase:
    """``response`` (the referenced bytes) as an attachment named after the reference,
    of a type safe to serve, and not to be sniffed."""
    name = reference.name.rsplit("/", 1)[-1] or reference.artifact.sha256
    response["Content-Type"] = served_type(reference.media_type)
    response["Content-Disposition"] = content_disposition_header(True, name)
    response["X-Content-Type-Options"] = "nosniff"
    return response
