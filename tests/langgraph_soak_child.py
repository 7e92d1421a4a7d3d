"""A LangGraph agent paying ``SOAK_CALLS`` invoices one after another on one thread, as
its own process under ``supervise`` (the soak: tests/test_agents_soak.py), checkpointed
in SQLite in its state folder so that a restarted agent goes on where it stopped. Its
model is scripted from the conversation: it pays INV-1, INV-2… whatever each answer
was, then says how many answers it read.

    python tests/langgraph_soak_child.py BASE_URL THREAD --state DIR"""

import sqlite3

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

from oversight_client import Observed, Oversight
from oversight_client.cursor import FileCursor
from oversight_client.langgraph import OversightToolNode, supervise, supervised_tool
from tests.soaking import calls, client, command_line, invoice


def main() -> None:
    options = command_line()
    ovs = client(Oversight, options.url)
    ledger, count = options.state / "ledger.txt", calls()

    def paid(arguments: dict, key: str) -> Observed:
        lines = ledger.read_text().splitlines() if ledger.exists() else []
        return Observed("applied", arguments) if f"[{key}]" in lines else Observed("absent")

    @supervised_tool(ovs, action="invoices.pay", rollback_kind="none", verify=paid, lease_seconds=2)
    def pay_invoice(invoice: str, amount: int, *, idempotency_key: str) -> dict:
        """Pay a supplier invoice."""
        with ledger.open("a") as out:
            out.write(f"{invoice} {amount}\n[{idempotency_key}]\n")
        return {"paid": invoice, "amount": amount}

    def agent(state: MessagesState) -> dict:
        answers = [m for m in state["messages"] if isinstance(m, ToolMessage)]
        if len(answers) >= count:
            return {"messages": [AIMessage(f"Done: {len(answers)} answers")]}
        n = len(answers) + 1
        call = {"name": "pay_invoice", "args": invoice(n), "id": f"pay-{n}"}
        return {"messages": [AIMessage("", tool_calls=[call])]}

    graph = StateGraph(MessagesState).add_node(agent).add_node(OversightToolNode([pay_invoice]))
    graph.add_edge(START, "agent").add_conditional_edges("agent", tools_condition)
    saved = sqlite3.connect(options.state / "checkpoints.sqlite", check_same_thread=False)
    app = graph.add_edge("tools", "agent").compile(checkpointer=SqliteSaver(saved))
    start = {"messages": [HumanMessage("Pay the invoices")]}
    cursor = FileCursor(options.state / "cursor")
    done = supervise(ovs, app, start, name=options.run, cursor=cursor)
    print(done["messages"][-1].content if done else "cancelled", flush=True)


if __name__ == "__main__":
    main()
