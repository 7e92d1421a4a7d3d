"""``question_tool``: a function tool through which the model asks a person, in words or
by one of ``choices``. Its ``needs_approval`` puts the question in the reviewers' queue
(a human request, named by the run and the SDK's call id), and the SDK interrupts the
run while it waits: no process is held (a plain tool calling ``ask`` would block one
until the answer). Resumed once it is answered, the tool answers the model with the
person's words, or says why there were none."""

import functools
from typing import Any

from agents import FunctionTool, RunContextWrapper
from agents.tool_context import ToolContext

from oversight_client.aio import AsyncOversight
from oversight_client.errors import InvalidRequest, RunClosed, Unreachable
from oversight_client.in_run import current_run
from oversight_client.reach import patiently
from oversight_client.told import as_text

DESCRIPTION = (
    "Ask a person a question and wait for their answer. Give `choices` when the answer "
    "must be one of them, else null."
)
PARAMETERS = {
    "type": "object",
    "properties": {
        "question": {"type": "string", "description": "What to ask, in one or two lines."},
        "choices": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
    },
    "required": ["question", "choices"],
    "additionalProperties": False,
}
NOT_ASKED = "Nobody could be asked: Oversight refused the question or could not be reached."


def asked(run_id: int, call_id: str) -> str:
    """The external id of the request a question tool's call puts (the model's call ids
    repeat across runs)."""
    return f"run-{run_id}:{call_id}"


def question_tool(
    ovs: AsyncOversight, *, name: str = "ask_a_person", description: str = DESCRIPTION
) -> FunctionTool:
    """The model's way to ask a person (see the module): give it to the agent beside its
    supervised tools, and run it under an ``OversightRunner`` (or ``supervise``)."""

    async def needs_approval(ctx: RunContextWrapper, arguments: dict, call_id: str) -> bool:
        run_id = current_run()
        request = await ovs.find_request(asked(run_id, call_id))
        if request is None:
            choices = arguments.get("choices") or None
            asking = functools.partial(
                ovs.ask,
                run_id,
                str(arguments.get("question") or ""),
                kind="choice" if choices else "question",
                choices=choices,
                external_id=asked(run_id, call_id),
            )
            try:
                request = await patiently(asking, ovs.wait_timeout)
            except (InvalidRequest, RunClosed, Unreachable):
                return False  # not asked: the body says so
        return request["status"] == "open"

    async def call(ctx: ToolContext, raw: str) -> str:
        return answer_text(await ovs.find_request(asked(current_run(), ctx.tool_call_id)))

    return FunctionTool(
        name=name,
        description=description,
        params_json_schema=PARAMETERS,
        on_invoke_tool=call,
        strict_json_schema=True,
        needs_approval=needs_approval,
    )


def answer_text(request: dict | None) -> str:
    """What the model reads of its question: the answer, or why there is none."""
    if request is None:
        return NOT_ASKED
    answer: dict[str, Any] = request.get("answer") or {}
    if request["status"] == "answered" and answer.get("kind") in ("answer", "choose"):
        return as_text(answer.get("data"))
    if request["status"] == "rejected":
        return f"A person declined to answer: {answer.get('comment') or 'no reason given'}"
    if request["status"] == "expired":
        return "Nobody answered in time."
    return f"The question was not answered ({request['status']})."
