"""What the async adapters that resume an agent's run share (the OpenAI Agents SDK's
runner, the Claude Agent SDK's agent): a ``Follower`` of the token's feed on an
``AsyncOversight``, above the client, as the feed's own loop (``follower``) is below it;
and the agent's turns mirrored into its run (``say``; the Agent Framework's too)."""

import logging
from collections.abc import Callable, Hashable
from typing import Any

from oversight_client.aio import AsyncOversight
from oversight_client.cursor import FileCursor
from oversight_client.errors import OversightError
from oversight_client.follower import Follower, cancels, decides
from oversight_client.storable import storable

log = logging.getLogger(__name__)


class RunResumer:
    """The base of the async adapters that resume an agent's run once what it waits
    for is decided (the OpenAI Agents SDK's runner, the Claude Agent SDK's agent): it
    follows the token's feed and calls ``_resume(run_id)`` on each decision, which
    answers whether the agent ran again and its result if it ended (kept in
    ``results``). ``cancelled`` lists the runs an admin cancelled while it followed;
    ``failed``, those whose resume raised."""

    def __init__(self, ovs: AsyncOversight, cursor: FileCursor | None = None) -> None:
        self.ovs = ovs
        self.feed = Follower(self._handle, lambda event: event["run"], cursor)
        self.results: dict[int, Any] = {}
        self.cancelled: set[int] = set()

    async def _resume(self, run_id: int) -> tuple[bool, Any]:
        raise NotImplementedError

    async def follow(self, stop: Callable[[], bool] = lambda: False, wait: int = 30) -> None:
        """Resume runs as their calls are decided, until ``stop()`` (asked between long
        polls of at most ``wait`` seconds); Oversight out of reach pauses, not ends, it."""
        await self.ovs.follow(self.feed, stop, wait)

    async def poll(self, wait: int = 0) -> int:
        """Handle one page of the feed; returns how many runs were resumed. A run whose
        resume raises is logged and kept in ``failed``: it holds up no other."""
        return await self.ovs.poll(self.feed, wait)

    @property
    def failed(self) -> dict[Hashable, str]:
        return self.feed.failed

    async def _handle(self, event: dict) -> bool:
        if cancels(event):
            self.cancelled.add(event["run"])
        if not decides(event):
            return False
        ran, result = await self._resume(event["run"])
        if result is not None:
            self.results[event["run"]] = result
        return ran


async def say(ovs: AsyncOversight, run_id: int, kind: str, text: str) -> None:
    """Mirror one of the agent's turns into the run's messages, where reviewers read it
    beside the proposals (cleaned and cut to what the server stores). Best effort: a
    turn Oversight cannot take (out of reach) is logged, and the agent goes on."""
    try:
        await ovs.message(run_id, storable(text), kind=kind)
    except OversightError as error:
        log.warning("run %s: a turn was not mirrored: %s", run_id, error)


async def last_mark(ovs: AsyncOversight, run_id: int, mark: str) -> dict | None:
    """The data of the run's last message that carries ``mark`` (None if none does):
    where an adapter names what a paused agent is to be resumed from."""
    found, after = None, 0
    while page := await ovs.messages(run_id, after, 100):
        for message in page:
            data = (message.get("payload") or {}).get("data") or {}
            if mark in data:
                found = data
        after = page[-1]["seq"]
    return found
