"""ASGI entry point for Oversight: the production server's (``manage.py serve`` runs it
under uvicorn).

A request goes one of two ways:

- A long-poll (a ``GET`` of an operation, a request or the event feed with a ``wait``
  other than 0) goes through Django's async handling, and through only the middleware
  an agent's read needs (HTTPS and the security headers: no session, no sign-in, no
  CSRF). While it waits it is a coroutine awaiting ``runs.api.watcher``: it holds no
  thread and no database connection, so a host keeps thousands open. Each synchronous
  step before the wait (a middleware's hook, the token's lookup, the first read) is a
  hand-over to a thread and back: with the whole stack, a thousand waits arriving at
  once took the server seconds to let in.
- Every other request goes to Django's WSGI handler on a fixed pool of
  ``OVERSIGHT_WEB_THREADS`` threads (a2wsgi), exactly as under a threaded WSGI server.
  Django's async handling runs each synchronous middleware and view on a thread of the
  request's own, handing over at every middleware: plain API reads answered at half
  the rate of threaded workers (measured for #17), and pages would pay the same. Its
  body is read whole on the event loop first, within ``OVERSIGHT_WEB_BODY_SECONDS`` and
  ``DATA_UPLOAD_MAX_MEMORY_SIZE``: read on a thread, forty bodies that never came held
  every thread of a server, and nothing else was answered.
"""

import asyncio
import gc
import json
import os
import re
from pathlib import Path
from urllib.parse import parse_qsl

import django
from a2wsgi import WSGIMiddleware
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.wsgi import WSGIHandler
from django.template.loader import get_template
from django.urls import reverse

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "oversight.settings")


LONG_POLLS = re.compile(r"/api/v1/(?:(?:operations|requests)/[0-9]+|events)")
WAIT_MIDDLEWARE = [
    "oversight.request_ids.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
]


def waits(scope: dict) -> bool:
    """Whether the request is a long-poll that asks to wait (``?wait=N``, N not 0)."""
    if scope["method"] != "GET" or not LONG_POLLS.fullmatch(scope["path"]):
        return False
    query = parse_qsl(scope["query_string"].decode("latin-1"))
    return any(name == "wait" and value.strip() not in ("", "0") for name, value in query)


class WaitHandler(ASGIHandler):
    def load_middleware(self, is_async: bool = False) -> None:
        """``WAIT_MIDDLEWARE`` instead of ``MIDDLEWARE`` (Django reads the setting, and
        this runs once, as the process starts)."""
        every = settings.MIDDLEWARE
        settings.MIDDLEWARE = WAIT_MIDDLEWARE
        try:
            super().load_middleware(is_async)
        finally:
            settings.MIDDLEWARE = every


class Oversight:
    def __init__(self, threads: int) -> None:
        django.setup(set_prefix=False)
        self.waiting = WaitHandler()
        self.answering = WSGIMiddleware(WSGIHandler(), workers=threads)
        warm_up()

    async def __call__(self, scope: dict, receive, send) -> None:
        if scope["type"] == "lifespan":  # Nothing to set up or tear down.
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":  # WebSockets: none served.
            await send({"type": "websocket.close"})
            return
        # A header named with an underscore would reach Django as the one named with a
        # dash (X_Forwarded_For as X-Forwarded-For, past the proxy that overwrites the
        # latter): dropped, as gunicorn drops them.
        headers = [(name, value) for name, value in scope["headers"] if b"_" not in name]
        scope = {**scope, "headers": headers}
        if waits(scope):
            await self.waiting(scope, receive, send)
            return
        try:
            body = await read_body(scope, receive)
        except BodyRefused as refused:
            await refused.send(scope, send)
            return
        if body is not None:  # None: the client left before its body was whole.
            await self.answering(scope, replayed(body, receive), send)


class BodyRefused(Exception):
    """A request's body that is not read: too slow to arrive (408) or too large (413)."""

    def __init__(self, status: int, error: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.error, self.detail = status, error, detail

    async def send(self, scope: dict, send) -> None:
        """The answer, in the API's own shape under /api/, as plain text elsewhere; the
        connection is closed after it, as what is left of the body is not read."""
        if scope["path"].startswith("/api/"):
            body = json.dumps({"error": self.error, "detail": self.detail, "field": None})
            kind = b"application/json"
        else:
            body, kind = f"{self.detail}\n", b"text/plain; charset=utf-8"
        body = body.encode()
        headers = [
            (b"content-type", kind),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def too_large(most: int) -> BodyRefused:
    # The API's own code for a body over its limit (runs.api.auth).
    return BodyRefused(413, "limit_exceeded", f"The request's body is over {most} bytes.")


def declared_length(scope: dict) -> int:
    """The body's length as its ``Content-Length`` says (0 without one: a chunked body
    is measured as it comes)."""
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit():
            return int(value)
    return 0


async def read_body(scope: dict, receive) -> bytes | None:
    """The request's whole body, read without a thread: within
    ``OVERSIGHT_WEB_BODY_SECONDS`` in all (not per chunk: a byte every few seconds is
    no better than none), and at most ``DATA_UPLOAD_MAX_MEMORY_SIZE`` bytes. One whose
    ``Content-Length`` says more is refused before any of it is read (a client that
    sent ``Expect: 100-continue`` is told not to send it). None when the client left
    before the end: nobody to answer, and half a form is not what was sent."""
    seconds, most = settings.OVERSIGHT_WEB_BODY_SECONDS, settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if declared_length(scope) > most:
        raise too_large(most)
    chunks, size = [], 0
    try:
        async with asyncio.timeout(seconds):
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return None
                chunks.append(message.get("body", b""))
                size += len(chunks[-1])
                if size > most:
                    raise too_large(most)
                if not message.get("more_body"):
                    return b"".join(chunks)
    except TimeoutError:
        raise BodyRefused(
            408, "request_timeout", f"The request's body did not arrive within {seconds} seconds."
        ) from None


def replayed(body: bytes, receive):
    """``receive`` for the handler: the body read, then what the client sends next (its
    disconnection)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def again() -> dict:
        return pending.pop() if pending else await receive()

    return again


def warm_up() -> None:
    """Do before the first request what it would otherwise do while someone waits, then
    keep the collector off what is loaded.

    The URLconf is imported on the first request (the API's schemas are built then, a
    third of a second), read again for the first link, and each template is compiled
    on its first use: a process's first page took 80-300 ms instead of 35. And every
    few dozen pages, Python's collector made a full pass over every object loaded
    (100,000, Django's and ours), 50 ms added to one page; frozen, they are left out of
    its passes (gc.freeze, as Python's documentation advises for servers), which then
    take a few milliseconds."""
    reverse("home")  # Imports the URLconf, and reads every page's name from it once.
    for directory in settings.TEMPLATES[0]["DIRS"]:
        for template in Path(directory).rglob("*.html"):
            get_template(template.relative_to(directory).as_posix())
    gc.collect()
    gc.freeze()


def __getattr__(name: str) -> Oversight:
    """``application``, for an ASGI server given ``oversight.asgi:application``, built
    when first asked for: ``serve`` imports this module to build its own, with its
    ``--threads``, and two would load every middleware twice in each process."""
    if name != "application":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    global application
    application = Oversight(threads=settings.OVERSIGHT_WEB_THREADS)
    return application
