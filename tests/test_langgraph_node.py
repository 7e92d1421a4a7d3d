"""``OversightToolNode`` against a live server, in graphs of the test's own: an action
Oversight's workers execute (and one they roll back), parallel calls in one AI message,
the node driven asynchronously, a supervised tool in LangGraph's plain ``ToolNode``,
arguments the model got wrong and arguments Oversight refuses. Reviewers decide through
the services, as the pages do; a ``Resumer`` polled by the test resumes the threads."""

import asyncio
import json
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command

from oversight_client import Observed, Oversight
from oversight_client.langgraph import OversightToolNode, Resumer, run_for_thread, supervised_tool
from runs.actions.files import workspace_of
from runs.canonical import sha256_hex
from runs.engine.boundaries import CLAIMED, ROLLING_BACK
from runs.engine.worker import Worker
from runs.models import Decision, Operation, Run
from tests.client_helpers import client_for, deciding
from tests.helpers import decide_on
from tests.langgraph_helpers import choose, example, messages, proposed, state

pytest_plugins = ["tests.client_helpers"]

NOTE = {"path": "notes/today.md", "content": "hello\n", "expected_sha256": None}


@pytest.fixture
def ovs(live_server, client_token) -> Oversight:
    """The client, giving up on a decision after 10 s: a node that waited for one,
    instead of pausing its thread, fails the test instead of hanging it."""
    return client_for(live_server, client_token, wait_timeout=10)


def config(thread: str) -> dict:
    return {"configurable": {"thread_id": thread}}


def scripted(calls: list[dict]):
    """A model's stand-in: the AI message making ``calls`` (name, args, id) first, then,
    once the tools answered, one saying what each answer was."""

    def agent(state: MessagesState) -> dict:
        answers = [m for m in state["messages"] if isinstance(m, ToolMessage)]
        if not answers:
            return {"messages": [AIMessage("", tool_calls=calls)]}
        return {"messages": [AIMessage(" | ".join(f"{m.status}: {m.content}" for m in answers))]}

    return agent


def graph_of(tool_node, calls: list[dict]):
    """agent → tools → agent, checkpointed in memory."""
    graph = StateGraph(MessagesState)
    graph.add_node("agent", scripted(calls))
    graph.add_node("tools", tool_node)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=InMemorySaver())


def payment_tool(ovs: Oversight, ledger: Path):
    """The example's payment, executed by the agent and written to ``ledger``."""

    def paid(arguments: dict, key: str) -> Observed:
        lines = ledger.read_text().splitlines() if ledger.exists() else []
        found = any(line.endswith(f"[{key}]") for line in lines)
        return Observed("applied", {"paid": arguments["invoice"]}) if found else Observed("absent")

    @supervised_tool(ovs, action="invoices.pay", rollback_kind="none", verify=paid)
    def pay_invoice(invoice: str, amount: int, *, idempotency_key: str) -> dict:
        """Pay a supplier invoice."""
        with ledger.open("a") as file:
            file.write(f"{invoice} {amount} [{idempotency_key}]\n")
        return {"paid": invoice, "amount": amount}

    return pay_invoice


def paid(ledger: Path) -> list[str]:
    """The ledger's payments, without their keys, in order."""
    lines = ledger.read_text().splitlines() if ledger.exists() else []
    return [line.split(" [")[0] for line in lines]


def pay(call_id: str, invoice: str, amount) -> dict:
    return {"name": "pay_invoice", "args": {"invoice": invoice, "amount": amount}, "id": call_id}


def ours(resumer: Resumer, thread: str) -> list:
    """The values the thread is paused on."""
    return [interrupt.value for interrupt in state(resumer, thread).interrupts]


def test_an_action_oversight_executes_answers_with_the_committed_output(ovs, reviewer, at_boundary):
    executed = []

    @supervised_tool(ovs, action="file.write", rollback_kind="in_band")
    def write_note(path: str, content: str, expected_sha256: str | None) -> dict:
        """Write a note in the workspace."""
        executed.append(path)
        return {}

    call = {"name": "write_note", "args": NOTE, "id": "write-1"}
    resumer = Resumer(graph_of(OversightToolNode([write_note]), [call]), ovs)
    resumer.start({"messages": [HumanMessage("Write today's note")]}, "t-server")
    op = proposed("write-1")
    assert (op.executor, op.action, op.arguments) == ("server", "file.write", NOTE)
    run = Run.objects.get(external_id="t-server")
    waiting = {"oversight": {"run": run.pk, "thread": "t-server", "operations": [op.pk]}}
    assert ours(resumer, "t-server") == [waiting]

    decide_on(op, reviewer, Decision.Kind.APPROVE)
    assert op.status == "approved"
    assert resumer.poll(wait=5) == 0  # approved, but no worker has executed it yet
    assert ours(resumer, "t-server") == [waiting]
    held = []

    def resume_while_held(claimed: Operation) -> None:
        held.append((ovs.operation(claimed.pk)["status"], resumer.resume("t-server")))

    at_boundary(CLAIMED, resume_while_held)
    Worker(name="test-worker").drain()
    assert held == [("in_flight", False)]  # no output to answer with yet
    op.refresh_from_db()
    assert op.status == "committed"

    assert resumer.poll(wait=5) == 1
    written = {"path": "notes/today.md", "sha256": sha256_hex(b"hello\n")}
    assert op.result["output"] == written
    *_, answer, last = messages(resumer, "t-server")
    assert (answer.tool_call_id, answer.status) == ("write-1", "success")
    assert json.loads(answer.content) == written
    assert last.content == f"success: {answer.content}"
    assert state(resumer, "t-server").next == ()
    assert executed == []
    assert (workspace_of(run.project) / "notes" / "today.md").read_text() == "hello\n"


def test_a_call_oversight_is_rolling_back_keeps_the_thread_paused(
    ovs, reviewer, target, at_boundary
):
    @supervised_tool(ovs, action="http.request", rollback_kind="compensating")
    def http_request(method: str, url: str, body: dict, verify: dict, compensate: dict) -> dict:
        """Change an item on the target."""

    arguments = {
        "method": "PUT",
        "url": f"{target.base}/rigged/items/x",  # answers 200 but garbles the write
        "body": {"colour": "green"},
        "verify": {"url": f"{target.base}/items/x", "json": {"colour": "green"}},
        "compensate": {"method": "DELETE", "url": f"{target.base}/items/x"},
    }
    call = {"name": "http_request", "args": arguments, "id": "http-1"}
    resumer = Resumer(graph_of(OversightToolNode([http_request]), [call]), ovs)
    resumer.start({"messages": [HumanMessage("Make it green")]}, "t-rollback")
    decide_on(proposed("http-1"), reviewer, Decision.Kind.APPROVE)
    during = []

    def resume_while_rolling_back(operation: Operation) -> None:
        status = ovs.operation(operation.pk)["status"]
        during.append((status, resumer.resume("t-rollback")))  # must not wait for it

    at_boundary(ROLLING_BACK, resume_while_rolling_back)
    Worker(name="test-worker").drain()
    assert during == [("verify_failed", False)]
    assert resumer.poll(wait=5) == 1
    answer = messages(resumer, "t-rollback")[-2]
    assert (answer.tool_call_id, answer.status) == ("http-1", "error")
    assert answer.content.startswith("This call's effect could not be verified (")
    assert Operation.objects.get().status == "compensated"


@pytest.mark.parametrize("node", [OversightToolNode, ToolNode])
def test_a_call_oversight_refuses_is_answered_with_the_reason(ovs, node):
    @supervised_tool(ovs, action="file.write", rollback_kind="in_band")
    def write_note(path: str, content: str, expected_sha256: str | None) -> dict:
        """Write a note in the workspace."""

    outside = {**NOTE, "path": "../outside.md"}
    graph = graph_of(node([write_note]), [{"name": "write_note", "args": outside, "id": "w-1"}])
    done = graph.invoke({"messages": [HumanMessage("Write it there")]}, config("t-refused"))
    answer = done["messages"][-2]
    assert (answer.tool_call_id, answer.status) == ("w-1", "error")
    assert answer.content.startswith("Oversight refused this call: arguments.path")
    assert graph.get_state(config("t-refused")).interrupts == ()
    assert not Operation.objects.exists()


def test_parallel_calls_pause_the_node_once_until_both_are_decided(ovs, reviewer, tmp_path):
    ledger = tmp_path / "ledger.txt"
    calls = [pay("pay-a", "INV-42", 120), pay("pay-b", "INV-7", 45)]
    graph = graph_of(OversightToolNode([payment_tool(ovs, ledger)]), calls)
    resumer = Resumer(graph, ovs)
    resumer.start({"messages": [HumanMessage("Pay both")]}, "t-both")
    first, second = proposed("pay-a"), proposed("pay-b")
    run = Run.objects.get(external_id="t-both")
    both = [first.pk, second.pk]
    assert ours(resumer, "t-both") == [
        {"oversight": {"run": run.pk, "thread": "t-both", "operations": both}}
    ]

    decide_on(first, reviewer, Decision.Kind.APPROVE)
    assert resumer.poll(wait=5) == 0
    assert resumer.resume("t-both") is False
    # Resumed anyway (by hand, too early): the node proposes again, nothing new, and
    # pauses on the call still waiting.
    graph.invoke(Command(resume=True), config("t-both"))
    assert ours(resumer, "t-both") == [
        {"oversight": {"run": run.pk, "thread": "t-both", "operations": [second.pk]}}
    ]
    assert Operation.objects.count() == 2
    assert paid(ledger) == []

    decide_on(second, reviewer, Decision.Kind.APPROVE)
    assert resumer.poll(wait=5) == 1
    answers = [m for m in messages(resumer, "t-both") if isinstance(m, ToolMessage)]
    assert [(m.tool_call_id, m.status, m.content) for m in answers] == [
        ("pay-a", "success", '{"paid": "INV-42", "amount": 120}'),
        ("pay-b", "success", '{"paid": "INV-7", "amount": 45}'),
    ]
    assert messages(resumer, "t-both")[-1].content == (
        'success: {"paid": "INV-42", "amount": 120} | success: {"paid": "INV-7", "amount": 45}'
    )
    assert sorted(paid(ledger)) == ["INV-42 120", "INV-7 45"]
    assert resumer.resume("t-both") is False
    assert Operation.objects.count() == 2
    assert sorted(Operation.objects.values_list("call_id", "status")) == [
        ("pay-a", "committed"),
        ("pay-b", "committed"),
    ]


def test_the_node_pauses_and_resumes_under_ainvoke(ovs, reviewer, tmp_path):
    """The example's graph driven with ``ainvoke``: the resume values are the ones the
    resumer finds, the graph is run by the test's event loop."""
    graph = example().build(ovs, tmp_path, InMemorySaver())
    resumer = Resumer(graph, ovs)

    def decided() -> dict:
        values = {}
        for interrupt in state(resumer, "t-async").interrupts:
            ready, value = resumer.ready(interrupt)
            if ready:
                values[interrupt.id] = value
        return values

    def resumed() -> None:
        asyncio.run(graph.ainvoke(Command(resume=decided()), config("t-async")))
        resumer.ask("t-async")

    asyncio.run(graph.ainvoke({"messages": []}, config("t-async")))
    resumer.ask("t-async")
    choose("t-async", reviewer, "INV-42")
    resumed()
    op = proposed("pay-INV-42-1")
    assert op.arguments == {"invoice": "INV-42", "amount": 120}
    run = Run.objects.get(external_id="t-async")
    assert ours(resumer, "t-async") == [
        {"oversight": {"run": run.pk, "thread": "t-async", "operations": [op.pk]}}
    ]
    assert decided() == {}
    decide_on(op, reviewer, Decision.Kind.APPROVE)
    resumed()
    *_, answer, last = messages(resumer, "t-async")
    assert (answer.status, answer.content) == ("success", '{"paid": "INV-42", "amount": 120}')
    assert last.content == 'Done: {"paid": "INV-42", "amount": 120}'
    assert paid(tmp_path / "ledger.txt") == ["INV-42 120"]
    assert state(resumer, "t-async").next == ()
    assert Operation.objects.get().status == "committed"


def test_in_a_plain_tool_node_a_supervised_call_waits_for_the_decision(ovs, reviewer, tmp_path):
    ledger = tmp_path / "ledger.txt"
    graph = graph_of(ToolNode([payment_tool(ovs, ledger)]), [pay("pay-1", "INV-7", 45)])
    with deciding(reviewer, "pay-1"):
        done = graph.invoke({"messages": [HumanMessage("Pay INV-7")]}, config("t-plain"))
    assert done["messages"][-1].content == 'success: {"paid": "INV-7", "amount": 45}'
    assert graph.get_state(config("t-plain")).interrupts == ()
    assert paid(ledger) == ["INV-7 45"]
    op = Operation.objects.get(call_id="pay-1")
    assert (op.run.external_id, op.status) == ("t-plain", "committed")


@pytest.mark.parametrize("node", [OversightToolNode, ToolNode])
def test_arguments_the_model_got_wrong_are_answered_without_a_proposal(ovs, tmp_path, node):
    ledger = tmp_path / "ledger.txt"
    graph = graph_of(node([payment_tool(ovs, ledger)]), [pay("pay-1", "INV-42", "lots")])
    done = graph.invoke({"messages": [HumanMessage("Pay INV-42")]}, config("t-invalid"))
    answer = done["messages"][-2]
    assert (answer.tool_call_id, answer.status) == ("pay-1", "error")
    assert answer.content == (
        "Error invoking tool 'pay_invoice' with kwargs {'invoice': 'INV-42', 'amount': 'lots'}"
        " with error:\n amount: Input should be a valid integer, unable to parse string as an"
        " integer\n Please fix the error and try again."
    )
    assert graph.get_state(config("t-invalid")).interrupts == ()
    assert (Operation.objects.count(), Run.objects.count()) == (0, 0)
    assert paid(ledger) == []


@pytest.mark.parametrize("node", [OversightToolNode, ToolNode])
def test_a_call_on_a_finished_thread_s_run_is_answered_not_made(ovs, tmp_path, node):
    run_id = run_for_thread(ovs, "t-finished")
    ovs.finish(run_id, "completed")
    ledger = tmp_path / "ledger.txt"
    graph = graph_of(node([payment_tool(ovs, ledger)]), [pay("pay-1", "INV-42", 120)])
    done = graph.invoke({"messages": [HumanMessage("Pay INV-42")]}, config("t-finished"))
    answer = done["messages"][-2]
    assert (answer.tool_call_id, answer.status) == ("pay-1", "error")
    assert answer.content == (
        f"This call was not made: run {run_id} is completed; it accepts nothing more"
    )
    assert not Operation.objects.exists() and paid(ledger) == []


def test_a_plain_tool_is_refused_unless_named_unsupervised(ovs, tmp_path):
    """The node proposes every call it runs: a plain tool would run unproposed and
    unaudited, so it must be named as such (#38, item 10)."""

    @tool
    def look_up(invoice: str) -> str:
        """Look an invoice up."""
        return f"{invoice}: open"

    supervised = payment_tool(ovs, tmp_path / "ledger.txt")
    with pytest.raises(ValueError, match="look_up would run at once, unproposed and unaudited"):
        OversightToolNode([supervised, look_up])
    with pytest.raises(ValueError, match="unsupervised names lookup, which is not"):
        OversightToolNode([supervised, look_up], unsupervised=["lookup"])

    node = OversightToolNode([supervised, look_up], unsupervised=["look_up"])
    graph = graph_of(node, [{"name": "look_up", "args": {"invoice": "INV-42"}, "id": "l-1"}])
    done = graph.invoke({"messages": [HumanMessage("Is INV-42 open?")]}, config("t-look"))
    assert done["messages"][-2].content == "INV-42: open"
    assert not Operation.objects.exists()
