"""Waiting for a person, failing closed: long-poll an operation or a human request until
it is settled; when the wait runs out, withdraw it first (so nothing fires), then raise
``WaitTimedOut``. A withdrawal refused because the server is already executing it (409)
means it is no longer ours to stop: the wait goes on until its outcome.

A server out of reach (``Unreachable``: refused connections, 429s, 502/503/504) does not
end the wait: it keeps polling, pausing longer each time, until the deadline, then
withdraws. Any other way out of the wait (an unexpected error, the async task cancelled,
Ctrl-C) withdraws too, as best it can, before it is raised: the agent is no longer
waiting, so nothing may fire on its behalf."""

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from oversight_client.calls import LONG_POLL_SECONDS, Endpoint
from oversight_client.errors import (
    ENDED,
    Conflict,
    OperationEnded,
    OversightError,
    Unreachable,
    VerificationFailed,
    WaitTimedOut,
)
from oversight_client.steps import Sleep, Steps

MAX_PAUSE = 30  # seconds between polls while the server is out of reach, at most
FIRST_PAUSE = 0.5  # seconds before asking again, doubled each time up to MAX_PAUSE
# Ways out of a wait that need no withdrawal: it ended, it was withdrawn, or the
# generator is being closed (and can no longer send anything).
SETTLED = (OperationEnded, WaitTimedOut, GeneratorExit)


def in_reach[T](make: Callable[[], Steps[T]], patience: float | None) -> Steps[T]:
    """``make()``'s steps, made again from the start while Oversight is out of reach
    (the request must be idempotent), pausing longer each time, until ``patience``
    seconds have passed (None: as long as it takes); then ``Unreachable``."""
    deadline = math.inf if patience is None else time.monotonic() + patience
    pause = FIRST_PAUSE
    while True:
        try:
            return (yield from make())
        except Unreachable:
            if time.monotonic() + pause > deadline:
                raise
        yield Sleep(pause)
        pause = min(pause * 2, MAX_PAUSE)


def operation_settled(operation: dict) -> bool:
    """Whether ``wait`` is done with ``operation``: committed, or (for an operation the
    agent executes) decided and not yet reported. Raises if it ended otherwise."""
    status = operation["status"]
    if status in ENDED:
        raise ENDED[status].of(operation)
    if status == "committed":
        return True
    if operation["executor"] != "agent":
        return False  # Oversight's workers are still on it
    if status == "verify_failed":
        raise VerificationFailed.of(operation)
    return status in ("approved", "in_flight")


def request_settled(request: dict) -> bool:
    """Whether a human request has its answer; raises ``Rejected``, ``Expired`` or
    ``Cancelled`` if it ended without one."""
    status = request["status"]
    if status == "open":
        return False
    if status == "answered":
        return True
    raise ENDED.get(status, OperationEnded).of_request(request)


def once(endpoint: Endpoint) -> Endpoint:
    """``endpoint`` without retries: for a best-effort call as the agent stops."""
    return dataclasses.replace(endpoint, retries=0)


@dataclass(frozen=True)
class Waitable:
    """What is waited for: operations or requests (``kind``, singular, names the
    exception's attribute and the API path's ``kind``s)."""

    kind: str
    settled: Callable[[dict], bool]

    def read(self, endpoint: Endpoint, pk: int, wait: int = 0, version: int | None = None):
        query = {} if version is None else {"version": version}
        return endpoint.call("GET", f"/{self.kind}s/{pk}", query=query, wait=wait)

    def withdraw(self, endpoint: Endpoint, pk: int, reason: str) -> Steps[dict]:
        return endpoint.call("POST", f"/{self.kind}s/{pk}/withdraw", {"reason": reason})

    def wait(self, endpoint: Endpoint, pk: int, timeout: float | None) -> Steps[dict]:
        """Long-poll until settled and return the object as last read."""
        try:
            return (yield from self.poll(endpoint, pk, timeout))
        except SETTLED:
            raise
        except BaseException as exc:
            yield from self.abandon(endpoint, pk, exc)
            raise

    def poll(self, endpoint: Endpoint, pk: int, timeout: float | None) -> Steps[dict]:
        deadline = None if timeout is None else time.monotonic() + timeout
        current: dict | None = None
        failures = 0
        while current is None or not self.settled(current):
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                current = yield from self.give_up(endpoint, pk, timeout)
                deadline = None  # executing already: wait for the outcome
                continue
            poll, version = 0, None  # the first read: as it is now
            if current is not None:
                poll, version = LONG_POLL_SECONDS, current["version"]
                if left is not None:
                    poll = min(poll, math.ceil(left))
            try:
                current = yield from self.read(endpoint, pk, poll, version)
                failures = 0
            except Unreachable:
                pause = min(2**failures, MAX_PAUSE)
                failures += 1
                yield Sleep(pause if left is None else min(pause, left))
        return current

    def give_up(self, endpoint: Endpoint, pk: int, timeout: float | None) -> Steps[dict]:
        """Withdraw and raise ``WaitTimedOut``; returns the object, read again, if the
        server refused the withdrawal (it is executing it, or it ended meanwhile)."""
        why = f"the agent stopped waiting after {timeout:g} s"
        try:
            withdrawn = yield from self.withdraw(endpoint, pk, why)
        except Conflict:
            return (yield from self.read(endpoint, pk))
        detail = f"{self.kind} {pk} was withdrawn: {why}"
        raise WaitTimedOut(None, "timeout", detail, **{self.kind: withdrawn})

    def abandon(self, endpoint: Endpoint, pk: int, cause: BaseException) -> Steps[None]:
        """Withdraw, once and without retries, as the wait ends on ``cause``; a refusal
        (it is executing, or ended) or a failure is left to ``cause``, which follows."""
        why = f"the agent stopped waiting: {type(cause).__name__}"
        with contextlib.suppress(OversightError):
            yield from self.withdraw(once(endpoint), pk, why)


OPERATIONS = Waitable("operation", operation_settled)
REQUESTS = Waitable("request", request_settled)
