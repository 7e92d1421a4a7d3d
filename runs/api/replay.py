"""``Idempotency-Key`` for every mutating API request: the first answer is stored and
replayed for retries, so an agent that lost a response can safely send it again.

The key is scoped to the credential (a hash of the Authorization header) and reserved
before the request runs, so a retry sent while the first attempt is still running
gets 409 ``request_in_progress`` (retry shortly) instead of running it twice. A retry
must be the same request: the same key with another method, path or body is a 422.
Server errors (5xx) release the key, so they can be retried for real; a reservation
whose request died with its process is taken over after ``ABANDONED``.
"""

import hashlib
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import HttpResponse, JsonResponse
from django.utils import timezone

from runs.models import AgentToken, ApiReplay

MUTATING = {"POST", "PUT", "PATCH", "DELETE"}
HEADER = "HTTP_IDEMPOTENCY_KEY"
IN_PROGRESS = 0


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _problem(status: int, error: str, detail: str, **headers) -> JsonResponse:
    response = JsonResponse(
        {"error": error, "detail": detail, "field": "Idempotency-Key"}, status=status
    )
    for name, value in headers.items():
        response[name] = value
    return response


class IdempotencyKeyMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        key = request.META.get(HEADER, "")
        if request.method not in MUTATING or not key or not request.path.startswith("/api/"):
            return self.get_response(request)
        if len(key) > 200:
            return _problem(422, "invalid", "Idempotency-Key: at most 200 characters")
        if not self._admissible(request):
            return self.get_response(request)  # The API refuses it (401 / 413) unread.
        scope = _sha(request.META.get("HTTP_AUTHORIZATION", "").encode())
        fingerprint = _sha(f"{request.method} {request.path}\n".encode() + request.body)
        row, refusal = self._reserve(scope, key, fingerprint)
        if refusal is not None:
            return refusal
        if row.status != IN_PROGRESS:
            replay = HttpResponse(bytes(row.body), status=row.status, content_type=row.content_type)
            replay["Idempotent-Replayed"] = "true"
            return replay
        response = self.get_response(request)
        stored = ApiReplay.objects.filter(pk=row.pk)
        if response.status_code >= 500 or getattr(response, "streaming", False):
            stored.delete()
        else:
            stored.update(
                status=response.status_code,
                content_type=response.get("Content-Type", "application/json"),
                body=response.content,
            )
        return response

    @staticmethod
    def _admissible(request) -> bool:
        """Only a request from a valid token, with a body within the limit, is stored
        or replayed: a revoked token gets no replays, and a huge body is not read."""
        if int(request.META.get("CONTENT_LENGTH") or 0) > settings.OVERSIGHT_API_MAX_BODY_BYTES:
            return False
        scheme, _, plain = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
        return scheme.lower() == "bearer" and AgentToken.authenticate(plain.strip()) is not None

    def _reserve(self, scope: str, key: str, fingerprint: str):
        """The key's row — reserved for this request, or finished earlier — or a refusal."""
        try:
            with transaction.atomic():
                row = ApiReplay.objects.create(
                    scope=scope,
                    key=key,
                    request_hash=fingerprint,
                    status=IN_PROGRESS,
                    content_type="",
                    body=b"",
                )
            return row, None
        except IntegrityError:
            row = ApiReplay.objects.get(scope=scope, key=key)
        if row.request_hash != fingerprint:
            return row, _problem(
                422, "idempotency_key_reused", "this Idempotency-Key was used for another request"
            )
        if row.status != IN_PROGRESS:
            return row, None
        abandoned = timezone.now() - timedelta(seconds=settings.OVERSIGHT_API_MAX_WAIT_SECONDS + 60)
        taken = ApiReplay.objects.filter(
            pk=row.pk, created_at=row.created_at, created_at__lt=abandoned
        )
        if taken.update(created_at=timezone.now()):
            return row, None
        return row, _problem(
            409,
            "request_in_progress",
            "an earlier request with this Idempotency-Key is still running; retry shortly",
            **{"Retry-After": "1"},
        )
