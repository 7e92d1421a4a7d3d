"""Each web request's id, and its line in the access log.

The id is the proxy's ``X-Request-ID`` when it sends a sensible one (letters, digits and
``._:-``, at most 128), otherwise one made here. Every line logged while the request is
handled carries it (``runs.logs``), the response gives it back in ``X-Request-ID``, and
the API's error bodies name it, so an agent's report, the proxy's log and Oversight's
lines meet on one value. When the request is answered, one line on ``oversight.access``
says what it was: method, path (never the query, which may hold what the caller typed),
status, time taken and who asked.

First in the middleware, the long-polls' included (``oversight.asgi``): sync and async."""

import logging
import re
import time
import uuid

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.utils.encoding import escape_uri_path

from runs.logs import in_request

HEADER = "X-Request-ID"
SENSIBLE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
access = logging.getLogger("oversight.access")


def request_id_of(request) -> str:
    given = request.headers.get(HEADER, "")
    return given if SENSIBLE.fullmatch(given) else uuid.uuid4().hex


class RequestIdMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self._answer_async(request)
        request.request_id = request_id_of(request)
        started = time.monotonic()
        with in_request(request.request_id):
            response = self.get_response(request)
            return _answered(request, response, started)

    async def _answer_async(self, request):
        request.request_id = request_id_of(request)
        started = time.monotonic()
        with in_request(request.request_id):
            response = await self.get_response(request)
            return _answered(request, response, started)


def _answered(request, response, started: float):
    response[HEADER] = request.request_id
    took = round((time.monotonic() - started) * 1000)
    access.info(
        "%s %s %s %d ms",
        request.method,
        escape_uri_path(request.path),  # as sent: a %0A never starts a line of its own
        response.status_code,
        took,
        extra={"status": response.status_code, "duration_ms": took, "by": _who(request)},
    )
    return response


def _who(request) -> str | None:
    """The person signed in, or none (an agent's token is named by its own lines)."""
    user = getattr(request, "user", None)
    return user.get_username() if user is not None and user.is_authenticated else None
