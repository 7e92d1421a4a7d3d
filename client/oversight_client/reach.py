"""Waiting for Oversight out of reach in an async adapter's own code (a checkpoint to
store, a call to decide): the work is done again from the start, pausing longer each
time, until the deadline; the client's steps do the same with ``waits.in_reach``. An
agent fails closed when Oversight is away, but it waits rather than exits: only the
deadline ends the wait, with ``Unreachable``."""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from oversight_client.errors import Unreachable
from oversight_client.follower import found_in
from oversight_client.waits import FIRST_PAUSE, MAX_PAUSE

log = logging.getLogger(__name__)


async def patiently[T](make: Callable[[], Awaitable[T]], patience: float | None) -> T:
    """``await make()``, made again while it fails for Oversight out of reach (it must be
    idempotent), until ``patience`` seconds have passed (None: as long as it takes)."""
    deadline = None if patience is None else time.monotonic() + patience
    pause = FIRST_PAUSE
    while True:
        try:
            return await make()
        except Exception as error:
            late = deadline is not None and time.monotonic() + pause > deadline
            if found_in(error, Unreachable) is None or late:
                raise
            log.warning("Oversight out of reach (%s): trying again in %g s", error, pause)
        await asyncio.sleep(pause)
        pause = min(pause * 2, MAX_PAUSE)
