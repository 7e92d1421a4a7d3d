"""A workflow's ``request_info`` as a human request in the reviewers' queue, and the
request's answer as the response the workflow declared (its ``response_type``).

- a ``bool`` response is a sign-off: True once signed off, False if rejected or expired;
- an ``Enum`` or ``Literal`` of strings offers its values as choices;
- a ``str`` is a question, answered in words;
- any other type (``int``, a dataclass, a pydantic model…) asks for data valid against
  its JSON Schema (a question, if it has none), and the answer is validated into that
  type.

The request's data is the prompt if it is a string, or if it has a ``prompt`` or
``question`` string field (its other fields are the context); otherwise it is shown as
JSON. A plain tool's approval request (``approval_mode="always_require"``, not under
Oversight) is a sign-off too: the framework runs the tool once signed off.

An answer the type refuses, or a rejected or expired request whose type has no room for
None, cannot be given to the workflow: ``Unusable`` says why, in words for the
reviewers."""

import enum
import json
import typing
from typing import Any

from agent_framework import Content, WorkflowEvent
from pydantic import TypeAdapter

from oversight_client.asking import within_limits
from oversight_client.told import as_text

ASKER = "The agent's workflow"
ENDED_REQUEST = ("answered", "rejected", "expired")  # cancelled: the run was, or we withdrew


class Unusable(Exception):
    """The request's end cannot be the workflow's response (the message says why)."""


def is_tool_approval(data: Any) -> bool:
    return isinstance(data, Content) and data.type == "function_approval_request"


def ask_for(event: WorkflowEvent) -> dict:
    """The keyword arguments of ``Oversight.ask`` for a pending ``request_info`` event,
    within the server's limits whatever the workflow asks with."""
    if is_tool_approval(event.data):
        call = event.data.function_call
        prompt = f"Allow the agent's call to {call.name}?"
        context = block(call.parse_arguments())
        return within_limits({"prompt": prompt, "kind": "sign_off", "context": context}, ASKER)
    return within_limits(described(event.data) | kind_of(event.response_type), ASKER)


def kind_of(response_type: Any) -> dict:
    """The kind of request (and its choices or schema) that ``response_type`` asks for."""
    if response_type is bool:
        return {"kind": "sign_off"}
    if offered := choices_of(response_type):
        return {"kind": "choice", "choices": offered}
    schema = None if response_type is str else schema_of(response_type)
    return {"kind": "question"} if schema is None else {"kind": "data", "answer_schema": schema}


def response_for(event: WorkflowEvent, request: dict) -> Any:
    """What the workflow that asked with ``event`` is given, once ``request`` ended."""
    answer = request.get("answer") or {}
    kind = answer.get("kind") if request["status"] in ("answered", "rejected") else None
    if is_tool_approval(event.data):
        return event.data.to_function_approval_response(kind == "approve")
    if event.response_type is bool:
        return kind == "approve"
    shape = TypeAdapter(event.response_type)
    if kind in ("answer", "choose"):
        try:
            return shape.validate_python(answer.get("data"))
        except Exception as refused:
            given = as_text(answer.get("data"))[:200]
            raise Unusable(f"The answer {given} is not a {named(event)}: {refused}") from None
    try:
        return shape.validate_python(None)
    except Exception:
        raise Unusable(ended_text(request)) from None


def ended_text(request: dict) -> str:
    if request["status"] == "rejected":
        reason = (request.get("answer") or {}).get("comment") or "no reason given"
        return f"A reviewer rejected the workflow's request: {reason}"
    if request["status"] == "expired":
        return "Nobody answered the workflow's request in time."
    return "The workflow's request ended without an answer."


def described(data: Any) -> dict:
    """The prompt and context of a request for ``data``."""
    if isinstance(data, str):
        return {"prompt": data}
    fields = plain(data)
    if isinstance(fields, dict):
        for key in ("prompt", "question"):
            if isinstance(fields.get(key), str):
                rest = {name: value for name, value in fields.items() if name != key}
                return {"prompt": fields[key]} | ({"context": block(rest)} if rest else {})
    return {"prompt": "The workflow waits for your answer.", "context": block(fields)}


def plain(data: Any) -> Any:
    """``data`` as JSON values (a dataclass or model as its fields)."""
    try:
        return TypeAdapter(type(data)).dump_python(data, mode="json")
    except Exception:
        return str(data)


def block(value: Any) -> str:
    return f"```json\n{json.dumps(value, indent=2, default=str)}\n```"


def choices_of(response_type: Any) -> list[str] | None:
    if isinstance(response_type, type) and issubclass(response_type, enum.Enum):
        values = [member.value for member in response_type]
    elif typing.get_origin(response_type) is typing.Literal:
        values = list(typing.get_args(response_type))
    else:
        return None
    return values if all(isinstance(value, str) for value in values) else None


def schema_of(response_type: Any) -> dict | None:
    """The JSON Schema of the answer, or None if the type has none."""
    try:
        return TypeAdapter(response_type).json_schema()
    except Exception:
        return None


def named(event: WorkflowEvent) -> str:
    return getattr(event.response_type, "__name__", str(event.response_type))
