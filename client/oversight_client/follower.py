"""Following the token's feed to resume agent runs as reviewers decide: what the
framework adapters whose runs pause (OpenAI Agents, Claude Agent SDK) share. Free of
any framework."""

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from oversight_client.aio import AsyncOversight
from oversight_client.cursor import FileCursor
from oversight_client.errors import Unreachable

log = logging.getLogger(__name__)
MAX_PAUSE = 30  # seconds between tries while Oversight is out of reach


class RunFollower:
    """Follows the token's feed (``cursor``, e.g. a ``FileCursor``, keeps its place
    across restarts) and resumes a run each time one of its operations is decided:
    ``_resume(run_id)`` answers whether the agent ran again and its result, if it
    ended (kept in ``results``)."""

    def __init__(self, ovs: AsyncOversight, cursor: FileCursor | None = None) -> None:
        self.ovs, self.cursor = ovs, cursor
        self.after = cursor.load() if cursor else 0
        self.results: dict[int, Any] = {}  # the runs that ended while followed
        self.failed: dict[int, str] = {}  # runs whose resume raised, with the error

    async def _resume(self, run_id: int) -> tuple[bool, Any]:
        raise NotImplementedError

    async def follow(self, stop: Callable[[], bool] = lambda: False, wait: int = 30) -> None:
        """Resume runs as their calls are decided, until ``stop()`` (asked between long
        polls of at most ``wait`` seconds); Oversight out of reach pauses, not ends, it."""
        pause = 1
        while not stop():
            try:
                await self.poll(wait)
                pause = 1
            except Unreachable:
                log.warning("Oversight is out of reach: trying again in %s s", pause)
                await asyncio.sleep(pause)
                pause = min(pause * 2, MAX_PAUSE)

    async def poll(self, wait: int = 0) -> int:
        """Handle one page of the feed; returns how many runs were resumed. A run whose
        resume raises is logged and kept in ``failed``: it holds up no other."""
        page = await self.ovs.events_page(self.after, wait)
        resumed = 0
        for event in page["events"]:
            if event["event"] == "operation.status" and event["to_status"] != "proposed":
                resumed += await self._resume_safely(event["run"])
            self.after = event["seq"]
            if self.cursor:
                self.cursor.save(self.after)
        self.after = max(self.after, page["cursor"])
        return resumed

    async def _resume_safely(self, run_id: int) -> bool:
        try:
            ran, result = await self._resume(run_id)
        except Unreachable:
            raise
        except Exception as error:
            log.exception("run %s could not be resumed", run_id)
            self.failed[run_id] = f"{type(error).__name__}: {error}"
            return False
        if result is not None:
            self.results[run_id] = result
        if ran:
            self.failed.pop(run_id, None)
        return ran


async def last_marked(ovs: AsyncOversight, run_id: int, mark: str) -> Any:
    """What the run's messages last gave as their data's ``mark`` (None if none did)."""
    named, after = None, 0
    while page := await ovs.messages(run_id, after, 100):
        for message in page:
            data = (message.get("payload") or {}).get("data") or {}
            if mark in data:
                named = data[mark]
        after = page[-1]["seq"]
    return named
