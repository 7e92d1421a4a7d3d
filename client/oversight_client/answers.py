"""A supervised call as the model reads its answer, in the adapters whose tools answer
with text (the OpenAI Agents SDK, the Agent Framework): framework-free."""

from collections.abc import Awaitable, Callable
from typing import Any

from oversight_client.aio import AsyncOversight
from oversight_client.errors import (
    InvalidRequest,
    NotProposed,
    OperationEnded,
    RunClosed,
    WaitTimedOut,
)
from oversight_client.told import as_text, edited, in_order, outcome


async def answer_of(
    ovs: AsyncOversight,
    engine: Callable[..., Awaitable[Any]],
    run_id: int,
    call_id: str,
    arguments: dict,
) -> str:
    """Make the call through ``engine`` (an ``AsyncOversight.tool``) and say what came of
    it: the output as JSON, naming a reviewer's edit, or why it was not made."""
    try:
        output = await engine(run_id, call_id, **arguments)
    except (OperationEnded, WaitTimedOut, NotProposed) as ended:
        return outcome(ended)
    except (InvalidRequest, RunClosed) as refused:
        return f"This call was not made: {refused.detail}"
    operation = await ovs.find_operation(run_id=run_id, call_id=call_id)
    if operation and operation["arguments"] != operation["proposed_arguments"]:
        return edited(in_order(operation["arguments"], arguments), output)
    return as_text(output)  # JSON, as the model reads it
