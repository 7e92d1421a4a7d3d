"""``supervised_tool``: a function under oversight as an Agent Framework ``FunctionTool``
with ``approval_mode="always_require"``. The framework pauses on each call and asks for
an approval; ``WorkflowDriver`` proposes the call to Oversight (the framework's call id as
``call_id``) and, once reviewers decided, lets the framework go on. Oversight's decision
is the one that counts: the body is the client's supervised-tool steps (claim, execute
once with the approved, maybe edited, arguments, verify, report), and a rejected,
expired or cancelled call never runs; the model reads why (a reviewer's reason
included), which the framework's own refusal, a fixed text, could not tell it."""

import contextvars
import inspect
import typing
from collections.abc import Callable
from typing import Any

from agent_framework import FunctionTool, MiddlewareFailure

from oversight_client.aio import AsyncOversight
from oversight_client.answers import answer_of
from oversight_client.errors import OversightError
from oversight_client.in_run import current_run
from oversight_client.told import in_order
from oversight_client.tool_options import taking_options

HIDDEN = "idempotency_key"  # a parameter of the function, never of the model's schema
_call: contextvars.ContextVar[str] = contextvars.ContextVar("agent_framework_call")


class SupervisedTool(FunctionTool):
    """A ``FunctionTool`` whose calls Oversight decides (see ``supervised_tool``)."""

    proposal: dict[str, Any]  # ToolOptions.proposal: action, rollback_kind, risk, summary

    async def invoke(self, *, tool_call_id: str | None = None, **kwargs: Any) -> Any:
        """The framework names the call here only: its body reads it from ``_call``."""
        token = _call.set(tool_call_id or "")
        try:
            return await super().invoke(tool_call_id=tool_call_id, **kwargs)
        finally:
            _call.reset(token)


@taking_options
def supervised_tool(
    ovs: AsyncOversight,
    *,
    name: str | None = None,
    description: str | None = None,
    **options: Any,
) -> Callable[[Callable[..., Any]], SupervisedTool]:
    """A decorator turning ``fn`` (which takes ``idempotency_key`` if the agent executes
    the action; the model never sees it) into a ``SupervisedTool``, with the options of
    ``AsyncOversight.tool`` (``ToolOptions``: forwarded as they are). Give it to the
    agent and to ``WorkflowDriver(tools=...)``."""

    supervise = ovs.tool(**options)  # Unknown or missing options fail here.

    def decorate(fn: Callable[..., Any]) -> SupervisedTool:
        engine = supervise(fn)

        async def call(**arguments: Any) -> str:
            run_id, call_id = current_run(), _call.get("")
            if not call_id:
                return "This call was not made: it has no call id to propose it under."
            try:
                return await made(run_id, call_id, arguments)
            except OversightError as error:
                # Not the model's to read (the framework would tell it "Function failed"
                # and carry on): the run stops before its next checkpoint, and the call
                # is made again from the last one, verified first.
                raise MiddlewareFailure(f"Oversight could not carry this call: {error}") from error

        async def made(run_id: int, call_id: str, arguments: dict) -> str:
            proposed = await ovs.find_operation(run_id=run_id, call_id=call_id)
            # As proposed (the framework may have filled in defaults since): the same
            # proposal again, which returns the operation the reviewers decided; in the
            # model's order, which PostgreSQL's jsonb does not keep.
            given = in_order(proposed["proposed_arguments"], arguments) if proposed else arguments
            return await answer_of(ovs, engine, run_id, call_id, given)

        shown = inspect.signature(fn)
        call.__signature__ = shown.replace(  # type: ignore[attr-defined]
            parameters=[p for p in shown.parameters.values() if p.name != HIDDEN],
            return_annotation=str,
        )
        hints = typing.get_type_hints(fn)  # resolved here: call lives in another module
        call.__annotations__ = {k: v for k, v in hints.items() if k not in (HIDDEN, "return")}
        call.__annotations__["return"] = str
        tool = SupervisedTool(
            name=name or fn.__name__,
            description=description or (fn.__doc__ or "").strip() or fn.__name__,
            func=call,
            approval_mode="always_require",
        )
        tool.proposal = engine.options.proposal
        return tool

    return decorate
