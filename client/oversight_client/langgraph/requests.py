"""A graph's own ``interrupt(value)`` as a human request in the reviewers' queue, and
the request's answer as the value the thread resumes with.

Values understood (anything else is a question, shown as JSON):

- a string: a question, answered in words; the thread resumes with the text;
- ``{"question": ..., "context": markdown, "choices": [...]}``: a question (resumes with
  the text) or, with choices, a choice (resumes with the choice);
- ``{"sign_off": ..., "context": ...}``: a sign-off; resumes with True (signed off) or
  False (rejected);
- LangGraph's HumanInterrupt list ``[{"action_request": {"action", "args"}, "config":
  {...}, "description"}]``: a sign-off if it allows accepting, else a question; resumes
  with ``[{"type": "accept" | "response" | "ignore", "args": ...}]`` (a rejection's reason
  is a ``response`` when allowed). Reviewers cannot edit its arguments.

``interrupt(..., response_schema=...)`` asks for data valid against that JSON Schema (a
dict, or a pydantic model) instead of words, and resumes with the data. A rejected or
expired question resumes with None. Oversight records who answered, when and what."""

import json
from typing import Any

from langgraph.types import Interrupt

from oversight_client.asking import within_limits

ASKER = "The agent's graph"


def ask_for(interrupt: Interrupt) -> dict:
    """The keyword arguments of ``Oversight.ask`` for ``interrupt``, within the server's
    limits whatever the graph interrupts with: a long prompt goes to the context, a long
    context is cut, and choices the server cannot offer become a question."""
    return within_limits(asked_for(interrupt), ASKER)


def asked_for(interrupt: Interrupt) -> dict:
    """The request ``interrupt`` asks, of an explicit kind."""
    value = interrupt.value
    if human := human_interrupt(value):
        request, allowed = human["action_request"], human.get("config") or {}
        context = f"```json\n{json.dumps(request.get('args', {}), indent=2, default=str)}\n```"
        asked = {"prompt": human.get("description") or f"Review {request['action']}"}
        kind = "sign_off" if allowed.get("allow_accept") else "question"
        return asked | {"kind": kind, "context": context}
    if isinstance(value, dict) and "sign_off" in value:
        prompt, context = str(value["sign_off"]), str(value.get("context", ""))
        return {"prompt": prompt, "kind": "sign_off", "context": context}
    if isinstance(value, dict) and "question" in value:
        asked = {"prompt": str(value["question"]), "context": str(value.get("context", ""))}
        if value.get("choices") is not None:
            choices = [str(choice) for choice in value["choices"]]
            return asked | {"kind": "choice", "choices": choices}
    else:
        prompt = value if isinstance(value, str) else json.dumps(value, default=str)
        asked = {"prompt": prompt}
    schema = schema_of(interrupt.response_schema)
    if schema is None:
        return asked | {"kind": "question"}
    return asked | {"kind": "data", "answer_schema": schema}


def schema_of(response_schema: Any) -> dict | None:
    """A JSON Schema from ``interrupt``'s ``response_schema`` (dict or pydantic model)."""
    if response_schema is None or isinstance(response_schema, dict):
        return response_schema
    return response_schema.model_json_schema()


def human_interrupt(value: Any) -> dict | None:
    """The HumanInterrupt in ``value``, if it is LangGraph's one-element list of one."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
        return value[0] if isinstance(value[0].get("action_request"), dict) else None
    return None


def resume_value(value: Any, request: dict) -> Any:
    """What the thread that interrupted with ``value`` resumes with, once ``request``
    ended (answered, rejected or expired)."""
    answer = request.get("answer") or {}
    kind = answer.get("kind") if request["status"] in ("answered", "rejected") else None
    if human := human_interrupt(value):
        allowed = human.get("config") or {}
        if kind == "approve":
            return [{"type": "accept", "args": None}]
        if kind == "answer":
            return [{"type": "response", "args": answer.get("data")}]
        if kind == "reject" and allowed.get("allow_respond"):
            return [{"type": "response", "args": answer.get("comment")}]
        return [{"type": "ignore", "args": None}]
    if isinstance(value, dict) and "sign_off" in value:
        return kind == "approve"
    return answer.get("data") if kind in ("answer", "choose") else None
