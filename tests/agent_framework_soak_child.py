"""An Agent Framework agent paying ``SOAK_CALLS`` invoices one after another in one
run, as its own process under ``supervise`` (the soak: tests/test_agents_soak.py). Its
model is scripted from the conversation (a restarted agent says the same thing): it
pays INV-1, INV-2… whatever each answer was, then says how many answers it read.

    python tests/agent_framework_soak_child.py BASE_URL RUN --state DIR"""

import asyncio
import json

from agent_framework import (
    Agent,
    BaseChatClient,
    ChatResponse,
    Content,
    FunctionInvocationLayer,
    Message,
    WorkflowBuilder,
)

from oversight_client import AsyncOversight
from oversight_client.agent_framework import supervise
from oversight_client.cursor import FileCursor
from tests.agent_framework_helpers import paying_tool
from tests.soaking import calls, client, command_line, invoice


class Invoices(FunctionInvocationLayer, BaseChatClient):
    def __init__(self, count: int) -> None:
        super().__init__()
        self.count = count

    async def _inner_get_response(self, *, messages, **options) -> ChatResponse:
        read = [c for m in messages for c in m.contents if c.type == "function_result"]
        if len(read) >= self.count:
            said = f"Done: {len(read)} answers"
            return ChatResponse(messages=[Message(role="assistant", contents=[said])])
        n = len(read) + 1
        arguments = json.dumps(invoice(n))
        call = Content.from_function_call(
            call_id=f"pay-{n}", name="pay_invoice", arguments=arguments
        )
        return ChatResponse(messages=[Message(role="assistant", contents=[call])])


async def main() -> None:
    options = command_line()
    ovs = client(AsyncOversight, options.url)
    tool = paying_tool(ovs, options.state / "ledger.txt", lease_seconds=2)
    model = Invoices(calls())

    def workflow():
        agent = Agent(client=model, tools=[tool], name="payer")
        return WorkflowBuilder(start_executor=agent, name="payments").build()

    cursor = FileCursor(options.state / "cursor")
    done = await supervise(
        ovs, workflow, "Pay the invoices", name=options.run, tools=[tool], cursor=cursor
    )
    print(done[-1].text if done else "cancelled", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
