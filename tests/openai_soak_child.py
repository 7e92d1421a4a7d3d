"""An OpenAI Agents SDK agent that pays ``COUNT`` invoices one after another in one run,
as its own process, under ``supervise`` (the soak: tests/test_agents_soak.py).

    python tests/openai_soak_child.py BASE_URL RUN --state DIR

``OVERSIGHT_TOKEN`` is its token, ``SOAK_CALLS`` how many invoices. Its model is
scripted from the conversation (a restarted agent says the same thing): it pays INV-1,
then INV-2… whatever each answer was, then says how many answers it read. Payments go
to ``DIR/ledger.txt`` with their idempotency key, which ``verify`` reads back."""

import asyncio

from agents import Agent, ModelResponse, Usage, set_tracing_disabled
from agents.models.interface import Model
from agents.testing import assistant_message, function_call

from oversight_client import AsyncOversight, Observed
from oversight_client.cursor import FileCursor
from oversight_client.openai_agents import supervise, supervised_function_tool
from tests.soaking import calls, client, command_line, invoice

LEASE_SECONDS = 2  # a takeover after a kill comes soon


class Invoices(Model):
    def __init__(self, count: int) -> None:
        self.count = count

    async def get_response(self, system_instructions, input, *args, **kwargs) -> ModelResponse:
        answers = [i for i in input if i.get("type") == "function_call_output"]
        if len(answers) >= self.count:
            said = assistant_message(f"Done: {len(answers)} answers")
            return ModelResponse(output=[said], usage=Usage(), response_id=None)
        n = len(answers) + 1
        call = function_call("pay_invoice", invoice(n), call_id=f"pay-{n}")
        return ModelResponse(output=[call], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("the scripted model does not stream")


async def main() -> None:
    options = command_line()
    ledger = options.state / "ledger.txt"
    ovs = client(AsyncOversight, options.url)

    async def paid(arguments: dict, key: str) -> Observed:
        lines = ledger.read_text().splitlines() if ledger.exists() else []
        return Observed("applied", arguments) if f"[{key}]" in lines else Observed("absent")

    @supervised_function_tool(
        ovs, action="invoices.pay", rollback_kind="none", verify=paid, lease_seconds=LEASE_SECONDS
    )
    async def pay_invoice(invoice: str, amount: int, *, idempotency_key: str) -> dict:
        """Pay a supplier invoice."""
        with ledger.open("a") as out:
            out.write(f"{invoice} {amount}\n[{idempotency_key}]\n")
        return {"paid": invoice, "amount": amount}

    agent = Agent(name="payer", model=Invoices(calls()), tools=[pay_invoice])
    cursor = FileCursor(options.state / "cursor")
    done = await supervise(ovs, agent, "Pay the invoices", name=options.run, cursor=cursor)
    print(done.final_output if done else "cancelled", flush=True)


set_tracing_disabled(True)
if __name__ == "__main__":
    asyncio.run(main())
