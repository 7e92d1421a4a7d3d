"""Shared by the LangGraph tests: the example agent's graph on a live server, driven in
the test's process (a ``Resumer`` polled by the test) or run as a child process, and
reviewers acting through the services as the pages do."""

import importlib.util
import sys
from pathlib import Path

from graphs.saver import OversightSaver
from oversight_client.langgraph import Resumer
from runs.models import HumanRequest, Operation, Run
from runs.services import requests as human_requests
from tests.helpers import decide_on
from tests.processes import agent_child

ROOT = Path(__file__).resolve().parent.parent


def example():
    """examples/langgraph_agent.py, imported as a module."""
    if "langgraph_agent" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "langgraph_agent", ROOT / "examples" / "langgraph_agent.py"
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules["langgraph_agent"] = module
        spec.loader.exec_module(module)
    return sys.modules["langgraph_agent"]


def state(agent: Resumer, thread: str):
    return agent.graph.get_state({"configurable": {"thread_id": thread}})


def messages(agent: Resumer, thread: str) -> list:
    return state(agent, thread).values["messages"]


def proposed(call_id: str) -> Operation:
    return Operation.objects.get(call_id=call_id, status="proposed")


def choose(thread: str, reviewer, choice: str) -> HumanRequest:
    """Answer the thread's open question with ``choice``."""
    request = HumanRequest.objects.get(run__external_id=thread, status="open")
    human_requests.answer(
        request=request, reviewer=reviewer, kind="choose", version=request.version, data=choice
    )
    return request


def paused_on_payment(agent: Resumer, thread: str, reviewer, invoice: str = "INV-42") -> Run:
    """Start the thread, pick ``invoice`` and resume: the payment waits for a decision."""
    agent.start({"messages": []}, thread)
    choose(thread, reviewer, invoice)
    assert agent.poll(wait=5) == 1
    return Run.objects.get(external_id=thread)


def decide(agent: Resumer, call_id: str, reviewer, kind: str, **decision) -> None:
    """Decide on the proposed call and let the resumer handle the feed."""
    decide_on(proposed(call_id), reviewer, kind, **decision)
    while agent.poll(wait=2):
        pass


def agent_process(base: str, token: str, thread: str, state: Path, *options: str, **env: str):
    """The example agent as a child process (tests/langgraph_child.py) on ``thread``,
    with the example's ``options`` (``--checkpointer oversight``, ``--project``…) and
    ``env`` added to its environment."""
    return agent_child("tests/langgraph_child.py", base, token, thread, state, *options, **env)


def conversation(project, thread: str) -> list[tuple]:
    """The messages of ``thread``'s latest checkpoint in Oversight's database (the
    example's ``--checkpointer oversight``), as the model read them: a human's words,
    the model's calls (id, arguments) or words, and each tool's answer."""
    saved = OversightSaver(project=project).get_tuple({"configurable": {"thread_id": thread}})
    shown = []
    for message in saved.checkpoint["channel_values"]["messages"]:
        if message.type == "tool":
            shown.append(("tool", message.tool_call_id, message.status, message.content))
        elif message.type == "ai" and message.tool_calls:
            shown.append(("ai", [(call["id"], call["args"]) for call in message.tool_calls]))
        else:
            shown.append((message.type, message.content))
    return shown
