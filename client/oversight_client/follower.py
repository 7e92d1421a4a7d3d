"""Following the token's feed to resume what waits for people: the loop every
framework's resumer shares (LangGraph's ``Resumer``, the OpenAI Agents SDK's
``OversightRunner``…), written once as steps that the sync and the async client both
drive: ``ovs.poll(follower)`` and ``ovs.follow(follower)``. It reads the feed through the
``Endpoint`` itself: ``Core``, whose ``poll`` and ``follow`` these are, sits above it.
What resumes on an ``AsyncOversight`` (``RunResumer``) is in ``resuming``, above both."""

import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from oversight_client.calls import Endpoint
from oversight_client.cursor import FileCursor
from oversight_client.errors import Unreachable
from oversight_client.steps import Invoke, Sleep, Steps, WrongClient
from oversight_client.waits import MAX_PAUSE

log = logging.getLogger(__name__)
FIRST_STATUS = ("proposed", "open")  # an operation's, a human request's


def decides(event: dict) -> bool:
    """Whether ``event`` decided something an agent may wait for: an operation or a
    human request left its first state."""
    return (
        event["event"] in ("operation.status", "request.status")
        and event["to_status"] not in FIRST_STATUS
    )


def cancels(event: dict) -> bool:
    """Whether ``event`` is an admin's cancel of its run: the adapters list the runs so
    ended in ``cancelled``, and never run their agent again."""
    return (event["event"], event["to_status"]) == ("run.status", "cancelled")


@dataclass
class Follower:
    """A resumer's place in the feed and what it does with each event: ``handle(event)``
    (a plain function with ``Oversight``, a coroutine function with ``AsyncOversight``)
    returns whether it resumed something. What ``handle`` raises is logged and kept in
    ``failed`` under ``subject(event)`` (the thread, the run), and the feed goes on: one
    broken run never holds up the others. ``cursor`` (a ``FileCursor``) keeps the place
    across restarts; without one, the feed is followed from its start. With ``only``,
    the events of any other subject are passed over (``supervise``: one run's agent
    never resumes another run)."""

    handle: Callable[[dict], Any]
    subject: Callable[[dict], Hashable]
    cursor: FileCursor | None = None
    failed: dict[Hashable, str] = field(default_factory=dict)
    only: Hashable | None = None
    after: int = field(init=False)

    def __post_init__(self) -> None:
        self.after = self.cursor.load() if self.cursor else 0

    def passed(self, seq: int) -> None:
        self.after = max(self.after, seq)
        if self.cursor:
            self.cursor.save(self.after)


def events_page(endpoint: Endpoint, after: int, wait: int, limit: int = 100) -> Steps[dict]:
    """One page of the token's feed (see ``Core.events_page``)."""
    query = {"after": after, "limit": limit}
    return endpoint.call("GET", "/events", query=query, wait=wait)


def poll_page(endpoint: Endpoint, follower: Follower, wait: int = 0) -> Steps[int]:
    """Handle one page of the feed (waiting up to ``wait`` seconds for an event); returns
    how many events resumed something."""
    page = yield from events_page(endpoint, follower.after, wait)
    resumed = 0
    for event in page["events"]:
        resumed += yield from handled(follower, event)
        follower.passed(event["seq"])
    follower.after = max(follower.after, page["cursor"])
    return resumed


def handled(follower: Follower, event: dict) -> Steps[bool]:
    subject = follower.subject(event)
    if follower.only is not None and subject != follower.only:
        return False
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
    endpoint: Endpoint, follower: Follower, stop: Callable[[], bool], wait: int = 30
) -> Steps[None]:
    """Handle the feed's events as they come, until ``stop()`` (asked between long polls
    of at most ``wait`` seconds). Oversight out of reach pauses it, longer each time (up
    to ``MAX_PAUSE`` seconds), instead of ending it."""
    pause = 1
    while not stop():
        try:
            yield from poll_page(endpoint, follower, wait)
            pause = 1
        except Unreachable:
            log.warning("Oversight is out of reach: trying again in %s s", pause)
            yield Sleep(pause)
            pause = min(pause * 2, MAX_PAUSE)
