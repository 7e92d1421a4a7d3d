"""Long-polls, and a cap on concurrent ones (``GET …?wait=N``), per token and in
all, so that waiting agents cannot take every server thread from the reviewers'
pages. A wait reads nothing while it waits (``runs.api.watcher`` wakes it) and gives
its database connection back meanwhile. A wait beyond a cap is refused at once with a
429 and a ``Retry-After``; a read without ``wait`` is never counted.

The count must hold across the server's worker processes, so it lives in the file
system, not in a process: each cap is a set of slot files under
``VAR_DIR/waits/``, and a wait holds an exclusive ``flock`` on one free slot of its
token and one of all. The kernel releases a lock when its file is closed or its process
dies, so a crashed worker never leaks a slot, and no table (or migration) is needed.
``flock`` locks belong to an open file, not a process, so threads of one process
count separately too. The cap is per host: servers behind one load balancer each
allow their own ``OVERSIGHT_API_MAX_WAITS``.
"""

import fcntl
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.db import connection
from django.http import JsonResponse

from runs.api.limits import LimitExceeded
from runs.api.watcher import WATCHER

RETRY_AFTER_SECONDS = 5


class Busy(Exception):
    """Every slot of a cap is held."""


def long_poll(
    token_pk: int, wait: int, changed: Callable[[], bool], watched: tuple[str, int, int]
) -> JsonResponse | None:
    """Ask ``changed()`` until it says yes or ``wait`` seconds (bounded by
    ``OVERSIGHT_API_MAX_WAIT_SECONDS``) have passed, holding a wait slot of the token's
    meanwhile; between two asks, sleep until ``watched`` (a kind of
    ``runs.api.watcher.COUNTERS``, a row and the counter's value when ``changed`` was
    first asked) moves. Returns the 429 to answer if no slot is free, else None.
    ``changed`` reads the database again each time it is asked, at least once."""
    if not 0 <= wait <= settings.OVERSIGHT_API_MAX_WAIT_SECONDS:
        raise LimitExceeded("wait", f"between 0 and {settings.OVERSIGHT_API_MAX_WAIT_SECONDS}")
    if not wait:
        changed()  # One read: the answer is what is there now.
        return None
    deadline = time.monotonic() + wait
    kind, pk, seen = watched
    try:
        with wait_slot(token_pk):
            while not changed() and (left := deadline - time.monotonic()) > 0:
                if not connection.in_atomic_block:
                    connection.close()  # Not held while waiting; the next read connects.
                seen = WATCHER.wait(kind, pk, seen, left)
    except Busy as busy:
        return too_many(busy)
    return None


@contextmanager
def wait_slot(token_pk: int) -> Iterator[None]:
    """Hold a slot of the token's cap and one of the cap on all waits for the body of
    the ``with``; raise ``Busy`` at once if either cap is full."""
    with (
        _slot(f"token-{token_pk}", settings.OVERSIGHT_API_MAX_WAITS_PER_TOKEN, "of this token"),
        _slot("all", settings.OVERSIGHT_API_MAX_WAITS, "in all"),
    ):
        yield


def too_many(busy: Busy) -> JsonResponse:
    """The API's refusal of a wait beyond a cap: a Problem body and when to try again."""
    return JsonResponse(
        {"error": "too_many_waits", "detail": f"wait: {busy}", "field": "wait"},
        status=429,
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


@contextmanager
def _slot(name: str, count: int, whose: str) -> Iterator[None]:
    folder = Path(settings.VAR_DIR) / "waits"
    folder.mkdir(parents=True, exist_ok=True)
    for number in range(count):
        fd = os.open(folder / f"{name}.{number}", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(fd)
            if isinstance(error, BlockingIOError):  # Held by another wait.
                continue
            raise
        try:
            yield
        finally:
            os.close(fd)  # Frees the slot.
        return
    raise Busy(f"{count} long-polls {whose} are already waiting; try again later")
