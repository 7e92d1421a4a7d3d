"""A Claude Agent SDK agent as its own process (the crash and browser tests): it pays
INV-7 through an in-process MCP tool under an ``OversightAgent``, in the run named
``claude-payments`` (the same run when restarted), and says on stdout where it is.

    python tests/claude_agent_child.py BASE_URL STATE_DIR

``OVERSIGHT_TOKEN`` is the agent's token; ``ANTHROPIC_BASE_URL`` and ``HOME`` point the
bundled CLI at the test's scripted model. With ``CRASH_AFTER_EFFECT`` set, the tool kills
its own process (SIGKILL) once the payment is in the ledger, before anything reports it;
with ``CRASH_AFTER_NAMING`` naming a file not there yet, the gate kills it once it has
named the waiting session on the run, before it proposes the call (the file records it).
Restarted, it goes on where it stopped (``OversightAgent.recover``)."""

import asyncio
import os
import signal
import sys
from pathlib import Path

from claude_agent_sdk import ClaudeAgentOptions, create_sdk_mcp_server, tool

from oversight_client import AsyncOversight
from oversight_client.claude_agent import Action, OversightAgent
from oversight_client.claude_agent.gate import OversightGate
from oversight_client.cursor import FileCursor
from oversight_client.errors import Conflict

RUN = "claude-payments"
ACTIONS = {"mcp__books__pay": Action("invoices.pay", "none", summary="Pay a supplier invoice.")}


def say(line: str) -> None:
    print(line, flush=True)


async def main(base: str, state: Path) -> None:
    ovs = AsyncOversight(base, os.environ["OVERSIGHT_TOKEN"], retries=2, backoff=0.1)

    @tool("pay", "Pay a supplier invoice", {"invoice": str, "amount": int})
    async def pay(args: dict) -> dict:
        with (state / "ledger.txt").open("a") as ledger:
            ledger.write(f"{args['invoice']} {args['amount']}\n")
        if os.environ.get("CRASH_AFTER_EFFECT"):
            os.kill(os.getpid(), signal.SIGKILL)
        return {"content": [{"type": "text", "text": f"paid {args['invoice']}: {args['amount']}"}]}

    options = ClaudeAgentOptions(
        mcp_servers={"books": create_sdk_mcp_server("books", tools=[pay])},
        tools=[],
        cwd=state,
    )
    agent = OversightAgent(ovs, ACTIONS, options, cursor=FileCursor(state / "cursor"))
    session = await ovs.open_session(title="Supplier payments", external_id=RUN)
    run = await ovs.start_run(session["id"], goal="Pay INV-7", external_id=RUN)
    if (await ovs.messages(run["id"])) == []:  # a first start, not a restart
        result = await agent.run("Pay INV-7", run["id"])
    else:
        result = await agent.recover("Pay INV-7", run["id"])
    if result is None:
        say("waiting for reviewers")
        await agent.follow(stop=lambda: run["id"] in agent.results, wait=2)
        result = agent.results[run["id"]]
    say(f"Done: {result.result}")
    try:
        await ovs.finish(run["id"], "completed")
    except Conflict as refused:  # an operation still in flight, say
        say(f"The run stays open: {refused.detail}")


name = OversightGate._name


async def name_then_die(self, session: str, call_id: str) -> None:
    await name(self, session, call_id)
    marker = os.environ.get("CRASH_AFTER_NAMING")
    if marker and not Path(marker).exists():
        Path(marker).write_text(call_id)
        os.kill(os.getpid(), signal.SIGKILL)


OversightGate._name = name_then_die
if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2])))
