"""``supervised_tool``: a function under oversight as a LangChain tool. The model sees
the function's own arguments only; the call is proposed with the tool call's id as
``call_id`` in the thread's run, and carried out by the client's supervised-tool steps
(``Oversight.tool``), so a repeated call never repeats an effect."""

from collections.abc import Callable
from typing import Annotated, Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import InjectedToolCallId, StructuredTool, ToolException
from langchain_core.tools.base import create_schema_from_function
from pydantic import ValidationError, create_model

from oversight_client.errors import (
    InvalidRequest,
    NotProposed,
    OperationEnded,
    RunClosed,
    Unreachable,
    WaitTimedOut,
)
from oversight_client.langgraph.threads import run_for_thread, thread_of
from oversight_client.sync import Oversight
from oversight_client.told import UNREACHABLE, edited, in_order, outcome
from oversight_client.tool_options import taking_options

CALL_ID = "oversight_call_id"  # the injected field: never in the model's schema


class SupervisedTool(StructuredTool):
    """A tool whose calls are proposed to Oversight first (see ``supervised_tool``)."""

    ovs: Oversight
    proposal: dict[str, Any]  # ToolOptions.proposal: action, rollback_kind, risk, summary

    def arguments(self, args: dict) -> dict | None:
        """The arguments a call proposes, as the tool will receive them (validated by
        its schema); None if the model's arguments are invalid (the tool node answers)."""
        try:
            parsed = self.tool_call_schema.model_validate(args)
        except ValidationError:
            return None
        return {name: getattr(parsed, name) for name in type(parsed).model_fields if name in args}

    def propose(self, run_id: int, call_id: str, arguments: dict) -> dict:
        """Propose the call (idempotent on ``call_id``) and return the operation; waits
        for Oversight out of reach as the call waits for a person."""
        patience = self.ovs.wait_timeout
        return self.ovs.propose(
            run_id, call_id, arguments=arguments, patience=patience, **self.proposal
        )


@taking_options
def supervised_tool(
    ovs: Oversight, *, name: str | None = None, description: str | None = None, **options: Any
) -> Callable[[Callable[..., Any]], SupervisedTool]:
    """A decorator turning ``fn`` into a LangChain tool under oversight, with the
    options of ``Oversight.tool`` (``ToolOptions``: forwarded as they are; ``fn`` takes
    ``idempotency_key`` if the agent executes the action; the model never sees it).

    A call proposes ``action`` in the run named by the graph's thread id, with the tool
    call's id as ``call_id``, and returns the committed output. In ``OversightToolNode``
    the thread pauses (``interrupt``) until reviewers decide; in a plain ``ToolNode`` the
    call waits for them, as ``Oversight.tool`` does. A call that ends without its effect
    (rejected, expired, cancelled, failed…) answers the model with an error message
    saying why; arguments a reviewer edited are named in the answer."""

    supervise = ovs.tool(**options)  # Unknown or missing options fail here.

    def decorate(fn: Callable[..., Any]) -> SupervisedTool:
        engine = supervise(fn)
        own = create_schema_from_function(fn.__name__, fn, filter_args=["idempotency_key"])
        injected = {CALL_ID: (Annotated[str, InjectedToolCallId], ...)}
        schema = create_model(f"{own.__name__}Call", __base__=own, **injected)

        def call(config: RunnableConfig, **arguments: Any) -> Any:
            call_id = arguments.pop(CALL_ID)
            try:
                run_id = run_for_thread(ovs, thread_of(config))
            except Unreachable as away:  # nothing proposed: the thread's run is not known
                raise ToolException(UNREACHABLE) from away
            try:
                output = engine(run_id, call_id, **arguments)
            except (OperationEnded, WaitTimedOut, NotProposed) as ended:
                raise ToolException(outcome(ended)) from ended
            except InvalidRequest as refused:  # arguments the action itself refuses
                raise ToolException(f"Oversight refused this call: {refused.detail}") from refused
            except RunClosed as closed:  # the thread's run was finished or cancelled
                raise ToolException(f"This call was not made: {closed.detail}") from closed
            operation = ovs.find_operation(run_id=run_id, call_id=call_id)
            if operation and operation["arguments"] != operation["proposed_arguments"]:
                return edited(in_order(operation["arguments"], arguments), output)
            return output

        return SupervisedTool(
            name=name or fn.__name__,
            description=description or (fn.__doc__ or "").strip() or fn.__name__,
            func=call,
            args_schema=schema,
            handle_tool_error=True,
            ovs=ovs,
            proposal=engine.options.proposal,
        )

    return decorate
