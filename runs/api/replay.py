"""``Idempotency-Key`` for every mutating API request: the first answer is stored and
replayed for retries, so an agent that lost a response can safely send it again.

The key's row, the request's writes and its stored reply commit in one transaction, or
none of them does. So, for the same credential (a hash of the Authorization header) and
key:

- A reply of 2xx or 4xx is stored with the writes that produced it. Every retry gets
  that reply (``Idempotent-Replayed: true``) and nothing runs again.
- A server error (5xx), an exception or a crashed process rolls back everything, the
  handler's writes included: nothing happened and the key stays free, so the retry
  runs the request for real, once.
- A retry sent while the first attempt still runs waits for it, then gets its reply (or
  runs, if the first rolled back). On PostgreSQL the second insert of the key waits for
  the first transaction; on SQLite ``BEGIN IMMEDIATE`` serialises the two.

A retry must be the same request: the same key with another method, path or body is a
422. A streaming reply is not stored (its writes commit and a retry runs again); no
mutating endpoint streams.

A stored reply lives ``OVERSIGHT_API_REPLAY_TTL`` (a day by default): older, it is
treated as absent (the request runs as a new one), and the workers' housekeeping
deletes it (``purge_expired``).
"""

import hashlib
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.http import HttpResponse, JsonResponse
from django.utils import timezone

from runs.api.problems import refusal
from runs.models import AgentToken, ApiReplay

MUTATING = {"POST", "PUT", "PATCH", "DELETE"}
HEADER = "HTTP_IDEMPOTENCY_KEY"
IN_PROGRESS = 0  # Seen only inside the request's own transaction.


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _refused(detail: str, error: str = "invalid") -> JsonResponse:
    return refusal(422, error, detail, "Idempotency-Key")


class IdempotencyKeyMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        key = request.META.get(HEADER, "")
        if request.method not in MUTATING or not key or not request.path.startswith("/api/"):
            return self.get_response(request)
        if len(key) > 200:
            return _refused("Idempotency-Key: at most 200 characters")
        if not self._admissible(request):
            return self.get_response(request)  # The API refuses it (401 / 413) unread.
        scope = _sha(request.META.get("HTTP_AUTHORIZATION", "").encode())
        fingerprint = _sha(f"{request.method} {request.path}\n".encode() + request.body)
        # The request holds this transaction (on SQLite, the write lock) from start to
        # end. That is acceptable because mutating endpoints are short: the long-poll
        # is a GET, and nothing that waits for a person mutates.
        with transaction.atomic():
            row, reserved = self._reserve(scope, key, fingerprint)
            if not reserved:
                return self._replay(row, fingerprint)
            response = self.get_response(request)
            self._store(row, response)
        return response

    @staticmethod
    def _admissible(request) -> bool:
        """Only a request from a valid token, with a body within the limit, is stored
        or replayed: a revoked token gets no replays, and a huge body is not read."""
        if int(request.META.get("CONTENT_LENGTH") or 0) > settings.OVERSIGHT_API_MAX_BODY_BYTES:
            return False
        scheme, _, plain = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
        return scheme.lower() == "bearer" and AgentToken.authenticate(plain.strip()) is not None

    @staticmethod
    def _reserve(scope: str, key: str, fingerprint: str) -> tuple[ApiReplay, bool]:
        """The key's row, and whether it was just reserved for this request. A row
        inserted by a transaction still running is not visible; inserting the same key
        waits for that transaction to end, then fails (the reply is there) or succeeds
        (it rolled back). An expired row is deleted first: the key is free again."""
        cutoff = timezone.now() - settings.OVERSIGHT_API_REPLAY_TTL
        ApiReplay.objects.filter(scope=scope, key=key, created_at__lt=cutoff).delete()
        return ApiReplay.objects.get_or_create(
            scope=scope,
            key=key,
            defaults={
                "request_hash": fingerprint,
                "status": IN_PROGRESS,
                "content_type": "",
                "body": b"",
            },
        )

    @staticmethod
    def _replay(row: ApiReplay, fingerprint: str) -> HttpResponse:
        if row.request_hash != fingerprint:
            return _refused(
                "this Idempotency-Key was used for another request", "idempotency_key_reused"
            )
        replay = HttpResponse(bytes(row.body), status=row.status, content_type=row.content_type)
        replay["Idempotent-Replayed"] = "true"
        return replay

    @staticmethod
    def _store(row: ApiReplay, response) -> None:
        """Store the reply in the request's transaction, or roll the request back."""
        stored = ApiReplay.objects.filter(pk=row.pk)
        if response.status_code >= 500:
            transaction.set_rollback(True)  # Its writes too: the retry runs for real.
        elif getattr(response, "streaming", False):
            stored.delete()
        else:
            stored.update(
                status=response.status_code,
                content_type=response.get("Content-Type", "application/json"),
                body=response.content,
            )


def purge_expired(now: datetime) -> int:
    """Delete the stored replies older than ``OVERSIGHT_API_REPLAY_TTL``; how many."""
    cutoff = now - settings.OVERSIGHT_API_REPLAY_TTL
    deleted, _ = ApiReplay.objects.filter(created_at__lt=cutoff).delete()
    return deleted
