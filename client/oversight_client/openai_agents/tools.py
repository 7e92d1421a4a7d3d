"""``supervised_function_tool``: a function under oversight as an Agents SDK function
tool. Its ``needs_approval`` is the proposal: the SDK interrupts the run only while the
operation waits for reviewers (a policy may have approved it already, and that approval
is audited all the same). Its body is the client's supervised-tool steps
(``AsyncOversight.tool``): claim, execute once with the approved arguments, verify,
report."""

import json
from collections.abc import Callable
from typing import Any

from agents import FunctionTool, RunContextWrapper, function_tool
from agents.tool_context import ToolContext

from oversight_client.aio import AsyncOversight
from oversight_client.answers import answer_of
from oversight_client.errors import InvalidRequest, RunClosed
from oversight_client.in_run import current_run

HIDDEN = "idempotency_key"  # a parameter of the function, never of the model's schema


def supervised_function_tool(
    ovs: AsyncOversight,
    *,
    action: str,
    rollback_kind: str,
    risk: str = "medium",
    summary: str | None = None,
    verify: Callable[..., Any] | None = None,
    undo: Callable[..., Any] | None = None,
    lease_seconds: int = 60,
    name: str | None = None,
    description: str | None = None,
) -> Callable[[Callable[..., Any]], FunctionTool]:
    """A decorator turning ``fn`` (which takes ``idempotency_key`` if the agent executes
    the action; the model never sees it) into a ``FunctionTool`` under oversight, with
    the options of ``AsyncOversight.tool``. A call that ends without its effect
    (rejected, expired, refused…) answers the model with why; arguments a reviewer
    edited are named in the answer."""

    def decorate(fn: Callable[..., Any]) -> FunctionTool:
        line = (fn.__doc__ or "").strip().partition("\n")[0]
        proposal = {
            "rollback_kind": rollback_kind,
            "risk": risk,
            "summary": (line if summary is None else summary)[:300],
        }
        engine = ovs.tool(
            action=action, verify=verify, undo=undo, lease_seconds=lease_seconds, **proposal
        )(fn)

        async def needs_approval(ctx: RunContextWrapper, arguments: dict, call_id: str) -> bool:
            try:
                operation = await ovs.propose(current_run(), call_id, action, arguments, **proposal)
            except (InvalidRequest, RunClosed):
                return False  # the body answers the model why
            return operation["status"] == "proposed"

        # Annotated ToolContext: the SDK passes the call's id only to a body that asks.
        async def call(ctx: ToolContext, raw: str) -> str:
            arguments, call_id = json.loads(raw or "{}"), ctx.tool_call_id
            return await answer_of(ovs, engine, current_run(), call_id, arguments)

        shape = function_tool(fn, name_override=name, description_override=description)
        schema = dict(shape.params_json_schema)
        schema["properties"] = {k: v for k, v in schema["properties"].items() if k != HIDDEN}
        schema["required"] = [k for k in schema.get("required", []) if k != HIDDEN]
        return FunctionTool(
            name=shape.name,
            description=shape.description,
            params_json_schema=schema,
            on_invoke_tool=call,
            strict_json_schema=shape.strict_json_schema,
            needs_approval=needs_approval,
        )

    return decorate
