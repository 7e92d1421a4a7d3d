"""Agents that keep going when Oversight is out of reach as a tool is called (#38, item
4): LangGraph, the OpenAI Agents SDK and the Agent Framework, each talking to the live
server through a relay the test cuts (tests/outage.py) just as the model makes its call.
A short outage is waited for: the call is proposed once, waits for a reviewer and is
made once. One that outlasts the client's ``wait_timeout`` ends the wait: the model
reads that the call was not made, and the agent goes on; nothing was proposed, nothing
made. Either way the agent's process carries on (before, ``Unreachable`` ended it);
LangGraph's thread opens its run in the outage too, and waits for that as well.
The Agent Framework stores a checkpoint before it proposes: that too waits, and only a
checkpoint it could not store ends the workflow, for its caller to start again."""

import asyncio
from collections.abc import Callable

import pytest
from agents import Agent, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

from oversight_client import AsyncOversight, NotProposed, Oversight, Unreachable
from oversight_client.agent_framework import WorkflowDriver
from oversight_client.core import ABANDONED
from oversight_client.langgraph import OversightToolNode, Resumer
from oversight_client.openai_agents import OversightRunner
from oversight_client.told import UNREACHABLE
from runs.models import Operation
from tests.agent_framework_helpers import PAY, ScriptedChat, paying_tool, paying_workflow, payments
from tests.client_helpers import NOTE, deciding
from tests.helpers import decide_on
from tests.outage import Outage
from tests.test_langgraph_node import paid, payment_tool
from tests.test_openai_agents import payer

pytest_plugins = ["tests.client_helpers"]
pytestmark = pytest.mark.timeout(120)
set_tracing_disabled(True)

SHORT = 3  # seconds Oversight is away in a short outage
QUICK = {"retries": 1, "backoff": 0.05, "timeout": 5}


def outage_on_call(outage: Outage, short: bool) -> Callable[[int], None]:
    """What the model does to Oversight each time it is asked (``turn`` 0, 1…): its
    first answer, the call, comes with an outage; a long one ends once the model has
    read the tool's answer (so that the agent's last words reach the run)."""

    def model_asked(turn: int) -> None:
        if turn == 0:
            outage.cut_for(SHORT) if short else outage.cut()
        else:
            outage.restore()

    return model_asked


def assert_made_once_after_a_review(call_id: str) -> Operation:
    operation = Operation.objects.get(call_id=call_id)
    assert operation.status == "committed"
    assert operation.checkpoints.filter(event="operation.proposed").count() == 1
    return operation


# --- LangGraph -------------------------------------------------------------------------


def langgraph_agent(ovs: Oversight, ledger, model_asked: Callable[[int], None]) -> Resumer:
    turns = []

    def agent(state: MessagesState) -> dict:
        model_asked(len(turns))
        turns.append(1)
        answers = [m for m in state["messages"] if isinstance(m, ToolMessage)]
        if not answers:
            call = {
                "name": "pay_invoice",
                "args": {"invoice": "INV-7", "amount": 45},
                "id": "pay-1",
            }
            return {"messages": [AIMessage("", tool_calls=[call])]}
        return {"messages": [AIMessage(" | ".join(f"{m.status}: {m.content}" for m in answers))]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", OversightToolNode([payment_tool(ovs, ledger)]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return Resumer(graph.compile(checkpointer=InMemorySaver()), ovs)


@pytest.mark.parametrize("short", [True, False], ids=["short", "long"])
def test_langgraph(live_server, client_token, reviewer, tmp_path, short):
    ledger = tmp_path / "ledger"
    with Outage(live_server.url) as outage:
        ovs = Oversight(outage.url, client_token, **QUICK, wait_timeout=30 if short else 3)
        resumer = langgraph_agent(ovs, ledger, outage_on_call(outage, short))
        resumer.start({"messages": [HumanMessage("Pay INV-7")]}, "t-away")
        last = resumer.graph.get_state({"configurable": {"thread_id": "t-away"}}).values
        if not short:
            assert last["messages"][-1].content == f"error: {UNREACHABLE}"
            assert not Operation.objects.exists() and paid(ledger) == []
            return
        decide_on(Operation.objects.get(call_id="pay-1", status="proposed"), reviewer)
        assert resumer.poll(wait=5) == 1
    assert paid(ledger) == ["INV-7 45"]
    assert_made_once_after_a_review("pay-1")


# --- the OpenAI Agents SDK -------------------------------------------------------------


class Asking(ScriptedModel):
    """The SDK's scripted model, telling ``model_asked`` each time it is asked."""

    def __init__(self, steps: list, model_asked: Callable[[int], None]) -> None:
        super().__init__(steps)
        self.model_asked = model_asked

    async def get_response(self, *args, **kwargs):
        self.model_asked(len(self.calls))
        return await super().get_response(*args, **kwargs)


@pytest.mark.parametrize("short", [True, False], ids=["short", "long"])
def test_openai_agents(live_server, client_token, run_id, reviewer, short):
    ledger = []
    with Outage(live_server.url) as outage:
        away = AsyncOversight(outage.url, client_token, **QUICK, wait_timeout=30 if short else 3)
        agent = payer(away, ledger)
        call = function_call("pay_invoice", {"invoice": "INV-7", "amount": 45}, call_id="pay-1")
        steps = [[call], [assistant_message("Reported.")]]
        agent = Agent(
            name="payer", model=Asking(steps, outage_on_call(outage, short)), tools=agent.tools
        )
        runner = OversightRunner(agent, away)
        result = asyncio.run(runner.run("Pay INV-7", run_id))
        if not short:
            told = next(i.output for i in result.new_items if i.type == "tool_call_output_item")
            assert told == UNREACHABLE
            assert not Operation.objects.exists() and ledger == []
            return
        assert result is None  # waits for reviewers
        decide_on(Operation.objects.get(call_id="pay-1", status="proposed"), reviewer)
        done = asyncio.run(runner.resume(run_id))
    assert done.final_output == "Reported."
    assert [entry for _, entry in ledger] == [("INV-7", 45)]
    assert_made_once_after_a_review("pay-1")


# --- the Agent Framework ---------------------------------------------------------------


class AskingChat(ScriptedChat):
    def __init__(self, calls: list, model_asked: Callable[[int], None]) -> None:
        super().__init__(calls)
        self.model_asked, self.turns = model_asked, 0

    async def _inner_get_response(self, *, messages, **options):
        self.model_asked(self.turns)
        self.turns += 1
        return await super()._inner_get_response(messages=messages, **options)


@pytest.mark.parametrize("short", [True, False], ids=["short", "long"])
def test_agent_framework(live_server, client_token, run_id, reviewer, tmp_path, short):
    """The workflow checkpoints before its call is proposed: the checkpoint waits for
    Oversight too, and one it cannot store before the deadline stops the workflow with
    ``Unreachable`` for its caller (what was not stored cannot be resumed), nothing
    proposed or made."""
    ledger = tmp_path / "ledger"
    with Outage(live_server.url) as outage:
        away = AsyncOversight(outage.url, client_token, **QUICK, wait_timeout=30 if short else 3)
        tool = paying_tool(away, ledger)
        model = AskingChat([PAY], outage_on_call(outage, short))
        driver = WorkflowDriver(lambda: paying_workflow(tool, chat=model), away, tools=[tool])
        if not short:
            with pytest.raises(Unreachable, match="/artifacts"):
                asyncio.run(driver.start("Pay INV-7", run_id))
            assert not Operation.objects.exists() and payments(ledger) == []
            return
        assert asyncio.run(driver.start("Pay INV-7", run_id)) is None  # waits for reviewers
        decide_on(Operation.objects.get(call_id="pay-1", status="proposed"), reviewer)
        assert asyncio.run(driver.poll(wait=5)) == 1
    assert payments(ledger) == ["INV-7 45"]
    assert_made_once_after_a_review("pay-1")


# --- a proposal that reached Oversight, its answer lost ---------------------------------


def test_a_proposal_given_up_that_reached_oversight_is_withdrawn_once_it_answers(
    live_server, client_token, run_id, reviewer
):
    """The model was told "not made": a proposal of that call that reached Oversight
    all the same (its answers lost) must never be approved and made. It is withdrawn
    as soon as Oversight answers the agent again."""
    made = []
    with Outage(live_server.url) as outage:
        away = Oversight(outage.url, client_token, **QUICK, wait_timeout=2)

        def written(arguments: dict, key: str) -> str:
            return "applied" if arguments["line"] in made else "absent"

        @away.tool(**NOTE, verify=written)
        def append_note(line: str, *, idempotency_key: str) -> None:
            made.append(line)

        outage.lose_answers(b"POST /api/v1/runs/")
        with pytest.raises(NotProposed):
            append_note(run_id, "note-1", line="paid")
        given_up = Operation.objects.get(call_id="note-1")
        assert given_up.status == "proposed"  # Oversight has it: reviewers could approve
        outage.lose_answers(None)
        with deciding(reviewer, "note-2"):
            append_note(run_id, "note-2", line="paid again")
    given_up.refresh_from_db()
    assert (given_up.status, given_up.status_reason) == ("cancelled", ABANDONED)
    assert made == ["paid again"]


def test_a_call_given_up_is_never_proposed_again(live_server, client_token, run_id, reviewer):
    """Its model was told it was not made: asked again under the same call id (an
    adapter's tool body after its approval hook gave up, say), it is not proposed, even
    with Oversight back, and never waits for a reviewer in the agent's process."""
    made = []
    with Outage(live_server.url) as outage:
        away = Oversight(outage.url, client_token, **QUICK, wait_timeout=1)

        @away.tool(**NOTE, verify=lambda arguments, key: "applied" if made else "absent")
        def append_note(line: str, *, idempotency_key: str) -> None:
            made.append(line)

        outage.cut()
        with pytest.raises(NotProposed):
            append_note(run_id, "note-1", line="paid")
        outage.restore()
        with pytest.raises(NotProposed, match="given up"):
            append_note(run_id, "note-1", line="paid")
        assert not Operation.objects.exists() and made == []
        with deciding(reviewer, "note-2"):
            append_note(run_id, "note-2", line="paid")  # another call goes through
    assert made == ["paid"]
