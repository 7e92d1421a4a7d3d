"""``Idempotency-Key`` for every mutating API request: the first answer is stored and
replayed for retries, so an agent that lost a response can safely send it again.

The key is scoped to the credential (a hash of the Authorization header). A retry
must be the same request: the same key with another method, path or body is a 422.
Server errors (5xx) are not stored, so they can be retried for real.
"""

import contextlib
import hashlib

from django.db import IntegrityError, transaction
from django.http import HttpResponse, JsonResponse

from runs.models import ApiReplay

MUTATING = {"POST", "PUT", "PATCH", "DELETE"}
HEADER = "HTTP_IDEMPOTENCY_KEY"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class IdempotencyKeyMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        key = request.META.get(HEADER, "")
        if request.method not in MUTATING or not key or not request.path.startswith("/api/"):
            return self.get_response(request)
        if len(key) > 200:
            return JsonResponse(
                {
                    "error": "invalid",
                    "detail": "Idempotency-Key: at most 200 characters",
                    "field": "Idempotency-Key",
                },
                status=422,
            )
        scope = _sha(request.META.get("HTTP_AUTHORIZATION", "").encode())
        fingerprint = _sha(f"{request.method} {request.path}\n".encode() + request.body)
        stored = ApiReplay.objects.filter(scope=scope, key=key).first()
        if stored is not None:
            if stored.request_hash != fingerprint:
                return JsonResponse(
                    {
                        "error": "idempotency_key_reused",
                        "detail": "this Idempotency-Key was used for a different request",
                        "field": "Idempotency-Key",
                    },
                    status=422,
                )
            replay = HttpResponse(
                bytes(stored.body), status=stored.status, content_type=stored.content_type
            )
            replay["Idempotent-Replayed"] = "true"
            return replay
        response = self.get_response(request)
        if response.status_code < 500 and not getattr(response, "streaming", False):
            # A concurrent retry may have stored its answer first; both answers stand.
            with contextlib.suppress(IntegrityError), transaction.atomic():
                ApiReplay.objects.create(
                    scope=scope,
                    key=key,
                    request_hash=fingerprint,
                    status=response.status_code,
                    content_type=response.get("Content-Type", "application/json"),
                    body=response.content,
                )
        return response
