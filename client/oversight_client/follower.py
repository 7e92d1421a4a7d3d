"""Following the token's feed to resume what waits for people: the loop every
framework's resumer shares (LangGraph's ``Resumer``, the OpenAI Agents SDK's
``OversightRunner``…), written once as steps that the sync and the async client both
drive: ``ovs.poll(follower)`` and ``ovs.follow(follower)``."""

import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from oversight_client.cursor import FileCursor
from oversight_client.errors import Unreachable
from oversight_client.steps import Invoke, Sleep, Steps, WrongClient
from oversight_client.waits import MAX_PAUSE

if TYPE_CHECKING:
    from oversight_client.aio import AsyncOversight
    from oversight_client.core import Core

log = logging.getLogger(__name__)
FIRST_STATUS = ("proposed", "open")  # an operation's, a human request's


def decides(event: dict) -> bool:
    """Whether ``event`` decided something an agent may wait for: an operation or a
    human request left its first state."""
    return (
        event["event"] in ("operation.status", "request.status")
        and event["to_status"] not in FIRST_STATUS
    )


@dataclass
class Follower:
    """A resumer's place in the feed and what it does with each event: ``handle(event)``
    (a plain function with ``Oversight``, a coroutine function with ``AsyncOversight``)
    returns whether it resumed something. What ``handle`` raises is logged and kept in
    ``failed`` under ``subject(event)`` (the thread, the run), and the feed goes on: one
    broken run never holds up the others. ``cursor`` (a ``FileCursor``) keeps the place
    across restarts; without one, the feed is followed from its start."""

    handle: Callable[[dict], Any]
    subject: Callable[[dict], Hashable]
    cursor: FileCursor | None = None
    failed: dict[Hashable, str] = field(default_factory=dict)
    after: int = field(init=False)

    def __post_init__(self) -> None:
        self.after = self.cursor.load() if self.cursor else 0

    def passed(self, seq: int) -> None:
        self.after = max(self.after, seq)
        if self.cursor:
            self.cursor.save(self.after)


def poll_page(core: "Core", follower: Follower, wait: int = 0) -> Steps[int]:
    """Handle one page of the feed (waiting up to ``wait`` seconds for an event); returns
    how many events resumed something."""
    page = yield from core.events_page(follower.after, wait)
    resumed = 0
    for event in page["events"]:
        resumed += yield from handled(follower, event)
        follower.passed(event["seq"])
    follower.after = max(follower.after, page["cursor"])
    return resumed


def handled(follower: Follower, event: dict) -> Steps[bool]:
    subject = follower.subject(event)
    try:
        resumed = yield Invoke(follower.handle, (event,))
    except WrongClient:
        raise  # an async handle given to the sync client: every event would fail
    except Exception as error:
        if (away := found_in(error, Unreachable)) is not None:
            # Not the subject's fault (a framework may have wrapped it): the event is
            # handled again once Oversight is back.
            raise away from error
        log.exception("%s could not be resumed", subject)
        follower.failed[subject] = f"{type(error).__name__}: {error}"
        return False
    if resumed:
        follower.failed.pop(subject, None)
    return bool(resumed)


def found_in[E: BaseException](error: BaseException, kind: type[E]) -> E | None:
    """``error`` or the first error it was raised from or during that is a ``kind``."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, kind):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def follow_feed(
    core: "Core", follower: Follower, stop: Callable[[], bool], wait: int = 30
) -> Steps[None]:
    """Handle the feed's events as they come, until ``stop()`` (asked between long polls
    of at most ``wait`` seconds). Oversight out of reach pauses it, longer each time (up
    to ``MAX_PAUSE`` seconds), instead of ending it."""
    pause = 1
    while not stop():
        try:
            yield from poll_page(core, follower, wait)
            pause = 1
        except Unreachable:
            log.warning("Oversight is out of reach: trying again in %s s", pause)
            yield Sleep(pause)
            pause = min(pause * 2, MAX_PAUSE)


class RunResumer:
    """The base of the async adapters that resume an agent's run once what it waits
    for is decided (the OpenAI Agents SDK's runner, the Claude Agent SDK's agent): it
    follows the token's feed and calls ``_resume(run_id)`` on each decision, which
    answers whether the agent ran again and its result if it ended (kept in
    ``results``). ``cancelled`` lists the runs an admin cancelled while it followed;
    ``failed``, those whose resume raised."""

    def __init__(self, ovs: "AsyncOversight", cursor: FileCursor | None = None) -> None:
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
        if (event["event"], event["to_status"]) == ("run.status", "cancelled"):
            self.cancelled.add(event["run"])
        if not decides(event):
            return False
        ran, result = await self._resume(event["run"])
        if result is not None:
            self.results[event["run"]] = result
        return ran


async def last_mark(ovs: "AsyncOversight", run_id: int, mark: str) -> dict | None:
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
