"""Following the token's feed until told to stop, in the async adapters' drivers (the
OpenAI Agents SDK's runner, the Agent Framework's workflow driver): framework-free."""

import asyncio
import logging
from collections.abc import Awaitable, Callable

from oversight_client.errors import Unreachable

log = logging.getLogger(__name__)
MAX_PAUSE = 30  # seconds between tries while Oversight is out of reach


async def follow(
    poll: Callable[[int], Awaitable[int]], stop: Callable[[], bool], wait: int
) -> None:
    """Call ``poll(wait)`` (one long poll of the feed) until ``stop()``; Oversight out of
    reach pauses, not ends, it, longer each time up to ``MAX_PAUSE`` seconds."""
    pause = 1
    while not stop():
        try:
            await poll(wait)
            pause = 1
        except Unreachable:
            log.warning("Oversight is out of reach: trying again in %s s", pause)
            await asyncio.sleep(pause)
            pause = min(pause * 2, MAX_PAUSE)
