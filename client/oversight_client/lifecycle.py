"""A run's whole life in one call, the same in every framework adapter (each one's
``supervise``): the run named ``name`` is found again, or opened the first time; the
agent starts, or after a restart goes on where it stopped; it is resumed as reviewers
decide (the events of other runs passed over) until it ends or an admin cancels its run;
then the run is finished (``complete``). A resume that raises ends it with
``AgentFailed``, the run left open. Oversight out of reach while the run is opened and
finished is waited for, as a call waits for a person."""

from collections.abc import Hashable
from typing import Any

from oversight_client.aio import AsyncOversight
from oversight_client.core import OPEN_RUN
from oversight_client.follower import Follower


async def open_named(ovs: AsyncOversight, name: str, goal: str) -> int:
    """The id of the run named ``name`` (``open_run``), Oversight away waited for."""
    return (await ovs.open_run(name, goal, patience=ovs.wait_timeout))["id"]


async def is_open(ovs: AsyncOversight, run_id: int) -> bool:
    """Whether the run is still open: not cancelled by an admin, failed or finished."""
    return (await ovs.run(run_id))["status"] in OPEN_RUN


def stopped(follower: Follower, name: Hashable) -> None:
    """Raise if the agent's resume failed (it is kept in ``failed``): the run stays
    open, and ``supervise`` again goes on where it stopped."""
    if name in follower.failed:
        raise AgentFailed(f"{name}: the agent could not go on: {follower.failed[name]}")


class AgentFailed(RuntimeError):
    """The agent of a supervised run raised as it was resumed (its model, a tool of its
    own, a workflow's definition): the run is left open to be supervised again."""


def goal_of(input: Any) -> str:
    """A run's goal from the agent's input: its text, or what it is."""
    return input if isinstance(input, str) and input else f"{type(input).__name__} input"
