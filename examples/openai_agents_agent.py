"""An example OpenAI Agents SDK agent under Oversight: it proposes to pay an invoice (a
supervised function tool: reviewers approve, reject with a reason or edit the amount),
tries once more with 10% off after a rejection, and tells what happened. Its model is
scripted (no network, no key): each reply is chosen from the conversation so far, so a
restarted agent says the same thing.

    pip install "./client[openai-agents]"
    OVERSIGHT_TOKEN=ovs_… python examples/openai_agents_agent.py http://127.0.0.1:8000 run-1

The run is named ``run-1`` in Oversight (its external id), where the paused agent's
state is stored. ``--state`` (default ``./openai-agents-agent``) keeps the feed's cursor
and the ledger the payments are written to. Kill it at any time and start it again: it
goes on where it was, and pays nothing twice."""

import argparse
import asyncio
import os
from pathlib import Path

from agents import Agent, ModelResponse, Usage, set_tracing_disabled
from agents.models.interface import Model
from agents.testing import assistant_message, function_call

from oversight_client import AsyncOversight, Observed
from oversight_client.cursor import FileCursor
from oversight_client.openai_agents import OversightRunner, supervised_function_tool

INVOICES = {"INV-42": 120, "INV-7": 45}
LEASE_SECONDS = 30


class ScriptedModel(Model):
    """Pays the invoice the user named; after a rejection, tries once more with 10% off;
    then reports the outcome."""

    async def get_response(self, system_instructions, input, *args, **kwargs) -> ModelResponse:
        return ModelResponse(output=[reply(input)], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("the scripted model does not stream")


def reply(conversation: list[dict]):
    asked = next(i["content"] for i in conversation if i.get("role") == "user")
    invoice = asked.removeprefix("Pay ")
    if invoice not in INVOICES:
        return assistant_message("Nothing to pay.")
    answers = [i["output"] for i in conversation if i.get("type") == "function_call_output"]
    if answers and (len(answers) > 1 or not answers[-1].startswith("A reviewer rejected")):
        return assistant_message(f"Done: {answers[-1]}")
    amount = INVOICES[invoice] * (90 if answers else 100) // 100
    call_id = f"pay-{invoice}-{len(answers) + 1}"
    return function_call("pay_invoice", {"invoice": invoice, "amount": amount}, call_id=call_id)


def record(ledger: Path, line: str) -> None:
    with ledger.open("a") as out:
        out.write(f"{line}\n")


def payer(ovs: AsyncOversight, ledger: Path) -> Agent:
    async def paid(arguments: dict, key: str) -> Observed:
        lines = ledger.read_text().splitlines() if ledger.exists() else []
        if any(line.endswith(f"[{key}]") for line in lines):
            return Observed(
                "applied", {"paid": arguments["invoice"], "amount": arguments["amount"]}
            )
        return Observed("absent")

    @supervised_function_tool(
        ovs, action="invoices.pay", rollback_kind="none", verify=paid, lease_seconds=LEASE_SECONDS
    )
    async def pay_invoice(invoice: str, amount: int, *, idempotency_key: str) -> dict:
        """Pay a supplier invoice."""
        record(ledger, f"{invoice} {amount} [{idempotency_key}]")
        return {"paid": invoice, "amount": amount}

    return Agent(name="payer", model=ScriptedModel(), tools=[pay_invoice])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0])
    parser.add_argument("url")
    parser.add_argument("run")
    parser.add_argument("--state", type=Path, default=Path("openai-agents-agent"))
    parser.add_argument("--invoice", default="INV-7", choices=sorted(INVOICES))
    options = parser.parse_args()
    options.state.mkdir(parents=True, exist_ok=True)
    ovs = AsyncOversight(options.url, os.environ["OVERSIGHT_TOKEN"])
    runner = OversightRunner(
        payer(ovs, options.state / "ledger.txt"), ovs, FileCursor(options.state / "cursor")
    )
    asked, run = f"Pay {options.invoice}", await ovs.find_run(options.run)
    if run is None:
        session = await ovs.open_session(title="Supplier payments")
        run = await ovs.start_run(session["id"], goal=asked, external_id=options.run)
        result = await runner.run(asked, run["id"])
    else:  # restarted: go on where the process died
        result = await runner.recover(asked, run["id"])
    final = result.final_output if result else await runner.concluded(run["id"])
    if final is None and await still_open(ovs, run["id"]):
        print("waiting for reviewers", flush=True)
        ended = lambda: run["id"] in runner.results or run["id"] in runner.cancelled  # noqa: E731
        await runner.follow(stop=ended, wait=10)
        final = runner.results[run["id"]].final_output if run["id"] in runner.results else None
    if final is None:
        print(f"The run is {(await ovs.run(run['id']))['status']}: stopped.", flush=True)
        return
    print(final, flush=True)
    if await still_open(ovs, run["id"]):
        await ovs.finish(run["id"], "completed")


async def still_open(ovs: AsyncOversight, run_id: int) -> bool:
    return (await ovs.run(run_id))["status"] in ("queued", "running", "waiting")


set_tracing_disabled(True)
if __name__ == "__main__":
    asyncio.run(main())
