"""A Claude Agent SDK agent paying invoices one after another in one session, as its
own process under ``supervise`` (the soak: tests/test_agents_soak.py). The bundled CLI
talks to the test's scripted model (``ANTHROPIC_BASE_URL``), which decides the calls.

    python tests/claude_soak_child.py BASE_URL RUN --state DIR

``OVERSIGHT_TOKEN`` is its token. Each payment is written to ``DIR/ledger.txt``; the
agent prints what it concluded."""

import asyncio

from claude_agent_sdk import ClaudeAgentOptions, create_sdk_mcp_server, tool

from oversight_client import AsyncOversight
from oversight_client.claude_agent import Action, supervise
from oversight_client.cursor import FileCursor
from tests.soaking import client, command_line

ACTIONS = {"mcp__books__pay": Action("invoices.pay", "none", summary="Pay a supplier invoice.")}


async def main() -> None:
    options = command_line()
    ovs = client(AsyncOversight, options.url)

    @tool("pay", "Pay a supplier invoice", {"invoice": str, "amount": int})
    async def pay(args: dict) -> dict:
        with (options.state / "ledger.txt").open("a") as ledger:
            ledger.write(f"{args['invoice']} {args['amount']}\n")
        return {"content": [{"type": "text", "text": f"paid {args['invoice']}"}]}

    cli = ClaudeAgentOptions(
        mcp_servers={"books": create_sdk_mcp_server("books", tools=[pay])},
        tools=[],
        cwd=options.state,
    )
    cursor = FileCursor(options.state / "cursor")
    done = await supervise(
        ovs, cli, "Pay the invoices", name=options.run, actions=ACTIONS, cursor=cursor
    )
    print(done.result if done else "cancelled", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
