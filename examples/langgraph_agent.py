"""An example LangGraph agent under Oversight: it asks the reviewers which invoice to pay
(a graph ``interrupt``), proposes the payment (a supervised tool: reviewers approve,
reject with a reason or edit the amount), and tells what happened. Its chat model is
scripted (no network, no key): each reply is chosen from the conversation so far, so a
restarted agent says the same thing.

    pip install "./client[langgraph]" langgraph-checkpoint-sqlite
    OVERSIGHT_TOKEN=ovs_… python examples/langgraph_agent.py http://127.0.0.1:8000 thread-1

It keeps its state in ``--state`` (default ``./langgraph-agent``): the graph's checkpoints
(SQLite), the feed's cursor and the ledger the payments are written to. Kill it at any
time and start it again: it goes on where it was, and pays nothing twice.

Beside Oversight, with access to its database (``pip install ".[langgraph]"`` in the
server's checkout, ``DJANGO_SETTINGS_MODULE=oversight.settings``),
``--checkpointer oversight`` keeps the checkpoints in Oversight's project ``--project``
instead, where auditors read them on the run's page."""

import argparse
import os
import sqlite3
from pathlib import Path

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition
from langgraph.types import interrupt

from oversight_client import Observed, Oversight
from oversight_client.langgraph import FileCursor, OversightToolNode, Resumer, supervised_tool

INVOICES = {"INV-42": 120, "INV-7": 45}
LEASE_SECONDS = 30


class ScriptedModel(BaseChatModel):
    """Pays the invoice named in the last request; after a rejection, tries once more
    with 10% off; then reports the outcome."""

    def bind_tools(self, tools, **kwargs):
        return self

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=reply(messages))])


def reply(messages) -> AIMessage:
    asked = [m for m in messages if isinstance(m, HumanMessage)][-1].content
    invoice = asked.removeprefix("Pay ")
    if invoice not in INVOICES:
        return AIMessage("Nothing to pay.")
    answers = [m for m in messages if isinstance(m, ToolMessage)]
    if answers and answers[-1].status != "error":
        return AIMessage(f"Done: {answers[-1].content}")
    if len(answers) >= 2:
        return AIMessage(f"Not paid: {answers[-1].content}")
    amount = INVOICES[invoice] * (90 if answers else 100) // 100
    call = {"name": "pay_invoice", "args": {"invoice": invoice, "amount": amount}}
    return AIMessage("", tool_calls=[{**call, "id": f"pay-{invoice}-{len(answers) + 1}"}])


def record(ledger: Path, line: str) -> None:
    with ledger.open("a") as file:
        file.write(f"{line}\n")


def sqlite_saver(state: Path):
    """Checkpoints in ``state``/checkpoints.sqlite."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    return SqliteSaver(sqlite3.connect(state / "checkpoints.sqlite", check_same_thread=False))


def oversight_saver(project: str):
    """Checkpoints in Oversight's database, in ``project``."""
    import django

    django.setup()
    from graphs.saver import OversightSaver

    return OversightSaver(project=project)


def build(ovs: Oversight, state: Path, checkpointer=None):
    """The graph, checkpointed by ``checkpointer`` (default: SQLite in ``state``)."""
    ledger = state / "ledger.txt"

    def paid(arguments: dict, key: str) -> Observed:
        lines = ledger.read_text().splitlines() if ledger.exists() else []
        found = any(line.endswith(f"[{key}]") for line in lines)
        return Observed("applied", {"paid": arguments["invoice"]}) if found else Observed("absent")

    @supervised_tool(
        ovs, action="invoices.pay", rollback_kind="none", verify=paid, lease_seconds=LEASE_SECONDS
    )
    def pay_invoice(invoice: str, amount: int, *, idempotency_key: str) -> dict:
        """Pay a supplier invoice."""
        record(ledger, f"{invoice} {amount} [{idempotency_key}]")
        return {"paid": invoice, "amount": amount}

    def ask(state: MessagesState) -> dict:
        choice = interrupt({"question": "Which invoice should I pay?", "choices": list(INVOICES)})
        return {"messages": [HumanMessage(f"Pay {choice}")]}

    def agent(state: MessagesState) -> dict:
        return {"messages": [ScriptedModel().bind_tools([pay_invoice]).invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("ask", ask)
    graph.add_node("agent", agent)
    graph.add_node("tools", OversightToolNode([pay_invoice]))
    graph.add_edge(START, "ask")
    graph.add_edge("ask", "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=checkpointer or sqlite_saver(state))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0])
    parser.add_argument("url")
    parser.add_argument("thread")
    parser.add_argument("--state", type=Path, default=Path("langgraph-agent"))
    parser.add_argument("--checkpointer", choices=["sqlite", "oversight"], default="sqlite")
    parser.add_argument("--project", default="demo", help="with --checkpointer oversight")
    args = parser.parse_args()
    args.state.mkdir(parents=True, exist_ok=True)
    ovs = Oversight(args.url, os.environ["OVERSIGHT_TOKEN"])
    saver = oversight_saver(args.project) if args.checkpointer == "oversight" else None
    graph = build(ovs, args.state, saver)
    resumer = Resumer(graph, ovs, FileCursor(args.state / "cursor"))
    thread = {"configurable": {"thread_id": args.thread}}
    if graph.get_state(thread).values:
        resumer.recover(args.thread)  # where it stopped, and what was decided meanwhile
    else:
        resumer.start({"messages": []}, args.thread)
    print("waiting for reviewers", flush=True)

    # Known from the feed: asking Oversight here would end the agent while it is out of
    # reach, which follow() waits out.
    def cancelled() -> bool:
        return args.thread in resumer.cancelled

    resumer.follow(stop=lambda: not graph.get_state(thread).next or cancelled(), wait=10)
    if cancelled():
        print("An admin cancelled this run: stopped.", flush=True)
        return
    print(graph.get_state(thread).values["messages"][-1].content, flush=True)
    run = ovs.find_run(args.thread)  # the thread is over: so is its run
    if run["status"] in ("queued", "running", "waiting"):
        ovs.finish(run["id"], "completed")


if __name__ == "__main__":
    main()
