"""A workflow's conversation as reviewers read it beside its proposals, as the OpenAI
runner mirrors its own: what each tool answered and what each agent said, from the
events of a workflow's run, as the run's messages (best effort: ``resuming.say``).
Without it, a workflow's run shows only its checkpoints."""

from collections.abc import Iterable, Iterator
from typing import Any

from agent_framework import AgentExecutorResponse, Message, WorkflowEvent

from oversight_client.aio import AsyncOversight
from oversight_client.resuming import say
from oversight_client.told import as_text


async def mirror(ovs: AsyncOversight, run_id: int, events: Iterable[WorkflowEvent]) -> None:
    """Mirror the agents' turns of one ``Workflow.run`` (its events)."""
    for event in events:
        if event.type != "executor_completed":
            continue
        for response in event.data if isinstance(event.data, list) else [event.data]:
            if isinstance(response, AgentExecutorResponse):
                named = calls(response.full_conversation)
                for kind, text in turns(response.agent_response.messages, named):
                    await say(ovs, run_id, kind, text)


def calls(messages: Iterable[Message]) -> dict[Any, str]:
    """The tool each call id of the conversation called: a call, or the approval asked
    or given for it (resumed after a pause for reviewers, the conversation holds the
    approval, not the call)."""
    named = {}
    for message in messages:
        for content in message.contents:
            call = content if content.type == "function_call" else content.function_call
            if call is not None:
                named[call.call_id] = call.name
    return named


def turns(messages: Iterable[Message], names: dict[Any, str]) -> Iterator[tuple[str, str]]:
    """The ``(kind, text)`` of each tool's answer and each thing an agent said."""
    for message in messages:
        for content in message.contents:
            if content.type == "function_result":
                name = names.get(content.call_id, "a tool")
                yield "tool", f"{name}: {as_text(content.result)}"
            elif content.type == "text" and content.text:
                yield "agent", content.text
