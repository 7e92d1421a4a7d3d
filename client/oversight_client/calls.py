"""One API call, as steps: the request built once (with its Idempotency-Key), sent again
with the same key while it fails on the way or the server fails it, and the answer
decoded or raised. A long poll is bounded by the server's longest wait, learned from its
first refusal."""

import json
import platform
import re
import urllib.parse
import uuid
from dataclasses import dataclass, field
from typing import Any

from oversight_client.errors import InvalidRequest, InvalidResponse, Unreachable, error_from
from oversight_client.steps import Send, Sleep, Steps
from oversight_client.transport import HttpRequest, HttpResponse, TransportError
from oversight_client.version import __version__

USER_AGENT = f"oversight-client/{__version__} Python/{platform.python_version()}"
# The body did not arrive in time (408: nothing of it was acted on), too many waits at
# once (429, with Retry-After), overloaded or its database out of reach (503, with
# Retry-After), or a gateway gave up.
RETRY_STATUSES = {408, 429, 502, 503, 504}
MUTATING = {"POST", "PUT", "PATCH", "DELETE"}
LONG_POLL_SECONDS = 30  # the server's default OVERSIGHT_API_MAX_WAIT_SECONDS
WAIT_LIMIT = re.compile(r"between 0 and (\d+)")  # its refusal's detail: "wait: between 0 and N"


def new_key() -> str:
    """A fresh Idempotency-Key: pass your own to make a create safe to repeat across
    restarts of your process (the server answers a repeat with the first answer)."""
    return uuid.uuid4().hex


def retry_after(response: HttpResponse) -> float:
    """A Retry-After given in seconds (capped at a minute); 0 if absent or a date."""
    try:
        return min(max(float(response.headers.get("retry-after") or 0), 0), 60)
    except ValueError:
        return 0


def retryable(request: HttpRequest, response: HttpResponse) -> bool:
    """Whether ``request`` is to be sent again after ``response``. Any server error is,
    for a request under an Idempotency-Key (every write): the server either rolled back
    what the failed attempt did and runs the retry once, or committed it before the
    answer went wrong and answers the retry with what it stored. A retry sent while the
    first attempt still runs waits for its answer on the server, so a 409 is always final."""
    return response.status in RETRY_STATUSES or (
        response.status >= 500 and "Idempotency-Key" in request.headers
    )


@dataclass
class Limits:
    """What the client learned of the server's limits: the longest long poll it allows
    (``OVERSIGHT_API_MAX_WAIT_SECONDS``). Shared by an endpoint and its copies."""

    max_wait: int = LONG_POLL_SECONDS

    def learned(self, refusal: InvalidRequest, wait: int) -> bool:
        """Whether ``refusal`` said that ``wait`` is longer than the server allows; if
        so, its maximum is kept for every later long poll."""
        found = WAIT_LIMIT.search(refusal.detail) if refusal.field == "wait" else None
        if found is None or int(found[1]) >= wait:
            return False
        self.max_wait = int(found[1])
        return True


@dataclass(frozen=True)
class Endpoint:
    """The server (``api`` ends in ``/api/v1``), the token, and how patiently to talk to
    it: ``timeout`` for one answer beyond a long poll's wait, ``retries`` attempts more
    for a request failing on the way, ``backoff`` seconds doubling each time."""

    api: str
    token: str
    timeout: float
    retries: int
    backoff: float
    limits: Limits = field(default_factory=Limits)

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict | None = None,
        idempotency_key: str | None = None,
        wait: int | None = None,
        raw: bool = False,
    ) -> Steps[Any]:
        """Returns the decoded JSON answer (the bytes, if ``raw``); raises the typed
        exception for an error answer, or ``Unreachable`` once every attempt failed.
        With ``wait`` (seconds; at most the server's longest), a long poll."""
        key = (idempotency_key or new_key()) if method in MUTATING else None
        while True:
            polled = None if wait is None else min(wait, self.limits.max_wait)
            if polled == 0 and wait:
                yield Sleep(min(wait, 1))  # the server allows no long poll: poll each second
            request = self.request(method, path, body, query, key, polled)
            try:
                return (yield from self.send(request, raw))
            except InvalidRequest as refused:
                if polled is None or not self.limits.learned(refused, polled):
                    raise

    def send(self, request: HttpRequest, raw: bool) -> Steps[Any]:
        """Send ``request`` until it gets an answer, at most ``retries`` times more."""
        for attempt in range(self.retries + 1):
            pause = 0.0
            try:
                response: HttpResponse = yield Send(request)
            except TransportError as exc:
                failure = str(exc)
            else:
                if not retryable(request, response):
                    return decoded(request, response, raw)
                failure, pause = f"HTTP {response.status}", retry_after(response)
            if attempt < self.retries:
                yield Sleep(max(self.backoff * 2**attempt, pause))
        raise Unreachable(None, "unreachable", f"{request.method} {request.url}: {failure}")

    def request(
        self,
        method: str,
        path: str,
        body: Any,
        query: dict | None,
        idempotency_key: str | None,
        wait: int | None,
    ) -> HttpRequest:
        url = self.api + path
        query = {**(query or {}), **({} if wait is None else {"wait": wait})}
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = {
            "Authorization": f"Bearer {self.token}",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
        }
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json"
        wait = wait or 0
        return HttpRequest(method, url, headers, data, self.timeout + wait, long_poll=wait > 0)


def decoded(request: HttpRequest, response: HttpResponse, raw: bool) -> Any:
    if response.status >= 400:
        raise error_from(response.status, response.body)
    if raw:
        return response.body
    try:
        return json.loads(response.body)
    except ValueError:  # not JSON, or not UTF-8
        seen = response.body[:200].decode(errors="replace")
        detail = f"{request.method} {request.url}: the answer is not JSON: {seen!r}"
        raise InvalidResponse(response.status, "invalid_response", detail) from None
