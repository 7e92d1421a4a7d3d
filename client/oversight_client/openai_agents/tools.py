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
from oversight_client.errors import InvalidRequest, RunClosed, Unreachable
from oversight_client.in_run import current_run
from oversight_client.tool_options import taking_options

HIDDEN = "idempotency_key"  # a parameter of the function, never of the model's schema


@taking_options
def supervised_function_tool(
    ovs: AsyncOversight,
    *,
    name: str | None = None,
    description: str | None = None,
    **options: Any,
) -> Callable[[Callable[..., Any]], FunctionTool]:
    """A decorator turning ``fn`` (which takes ``idempotency_key`` if the agent executes
    the action; the model never sees it) into a ``FunctionTool`` under oversight, with
    the options of ``AsyncOversight.tool`` (``ToolOptions``: forwarded as they are). A
    call that ends without its effect (rejected, expired, refused…) answers the model
    with why; arguments a reviewer edited are named in the answer."""

    supervise = ovs.tool(**options)  # Unknown or missing options fail here.

    def decorate(fn: Callable[..., Any]) -> FunctionTool:
        engine = supervise(fn)
        proposal, patience = engine.options.proposal, ovs.wait_timeout

        async def needs_approval(ctx: RunContextWrapper, arguments: dict, call_id: str) -> bool:
            try:
                operation = await ovs.propose(
                    current_run(), call_id, arguments=arguments, patience=patience, **proposal
                )
            except (InvalidRequest, RunClosed, Unreachable):
                return False  # refused, the run is over, or given up: the body says which
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
