"""Long-polls, and a cap on concurrent ones (``GET …?wait=N``), per token and in
all. A wait reads nothing while it waits (``runs.api.watcher`` wakes it), gives its
database connection back meanwhile, and under the production server holds no thread
either: it costs its socket and two open files, and the caps keep those (and one
agent's share) bounded. A wait beyond a cap is refused at once with a
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
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from asgiref.sync import SyncToAsync, sync_to_async
from django.conf import settings
from django.db import connection
from django.http import JsonResponse

from runs.api.limits import LimitExceeded
from runs.api.problems import refusal
from runs.api.watcher import WATCHER

RETRY_AFTER_SECONDS = 5


class Busy(Exception):
    """Every slot of a cap is held."""


async def long_poll(
    token_pk: int, wait: int, changed: Callable[[], bool], watched: tuple[str, int, int]
) -> JsonResponse | None:
    """Ask ``changed()`` (in a thread: it reads the database) until it says yes or
    ``wait`` seconds (bounded by ``OVERSIGHT_API_MAX_WAIT_SECONDS``) have passed,
    holding a wait slot of the token's meanwhile; between two asks, await ``watched``
    (a kind of ``runs.api.watcher.COUNTERS``, a row and the counter's value when
    ``changed`` was first asked) moving, or the token ceasing to act. Returns the 429
    to answer if no slot is free, the 401 if the token ceased to act, else None.
    ``changed`` reads the database again each time it is asked, at least once."""
    if not 0 <= wait <= settings.OVERSIGHT_API_MAX_WAIT_SECONDS:
        raise LimitExceeded("wait", f"between 0 and {settings.OVERSIGHT_API_MAX_WAIT_SECONDS}")
    ask = sync_to_async(changed)
    if not wait:
        await ask()  # One read: the answer is what is there now.
        return None
    deadline = time.monotonic() + wait
    kind, pk, seen = watched
    acting = True
    try:
        with wait_slot(token_pk):
            while not await ask() and (left := deadline - time.monotonic()) > 0:
                await sync_to_async(_let_go_of_the_connection)()
                _let_go_of_the_thread()
                seen, acting = await WATCHER.wait(
                    left, (kind, pk, seen), ("token", token_pk, acting)
                )
                if not acting:
                    return no_longer_acting()
    except Busy as busy:
        return too_many(busy)
    return None


def _let_go_of_the_thread() -> None:
    """Under ASGI, Django runs a request's synchronous parts (its middleware, the reads
    above) on a thread of the request's own, kept until the request ends: a wait would
    hold it for nothing. Shut it down; the request's next synchronous part starts
    another. (Under WSGI those parts run on the request's thread, and this does
    nothing.) These are asgiref's own attributes, not its documented interface: if they
    change, ``test_waiting_long_polls_hold_no_server_thread`` counts the threads kept."""
    context = SyncToAsync.thread_sensitive_context.get(None)
    executor = SyncToAsync.context_to_thread_executor.pop(context, None) if context else None
    if executor is not None:
        executor.shutdown(wait=False)


def _let_go_of_the_connection() -> None:
    """A waiting request holds no database connection: the next read connects again."""
    if not connection.in_atomic_block:
        connection.close()


@contextmanager
def wait_slot(token_pk: int) -> Iterator[None]:
    """Hold a slot of the token's cap and one of the cap on all waits for the body of
    the ``with``; raise ``Busy`` at once if either cap is full."""
    with (
        _slot(f"token-{token_pk}", settings.OVERSIGHT_API_MAX_WAITS_PER_TOKEN, "of this token"),
        _slot("all", settings.OVERSIGHT_API_MAX_WAITS, "in all"),
    ):
        yield


def no_longer_acting() -> JsonResponse:
    """The API's answer to a wait whose token was revoked, or whose owner left the
    project, while it waited: what any request of that token is now answered."""
    detail = "the agent token was revoked, or its owner left the project, while this waited"
    return refusal(401, "unauthenticated", detail)


def too_many(busy: Busy) -> JsonResponse:
    """The API's refusal of a wait beyond a cap: a Problem body and when to try again."""
    return refusal(
        429,
        "too_many_waits",
        f"wait: {busy}",
        "wait",
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


@contextmanager
def _slot(name: str, count: int, whose: str) -> Iterator[None]:
    folder = Path(settings.VAR_DIR) / "waits"
    folder.mkdir(parents=True, exist_ok=True)
    start = random.randrange(count)  # With thousands of slots, few are tried.
    for number in ((start + n) % count for n in range(count)):
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
