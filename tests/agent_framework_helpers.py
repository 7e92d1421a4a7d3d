"""Shared by the Agent Framework tests (in the test's process and as a child process):
a scripted chat client (no key, no network), an agent paying invoices through a
supervised tool into a ledger file, and a workflow of plain executors asking questions."""

import enum
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Never

from agent_framework import (
    Agent,
    BaseChatClient,
    ChatResponse,
    Content,
    Executor,
    FunctionInvocationLayer,
    Message,
    Workflow,
    WorkflowBuilder,
    WorkflowContext,
    handler,
    response_handler,
    tool,
)

from oversight_client import AsyncOversight, Observed
from oversight_client.agent_framework import SupervisedTool, supervised_tool
from tests.processes import agent_child

PAY = ("pay_invoice", {"invoice": "INV-7", "amount": 45}, "pay-1")
# Three calls in one turn, for a reviewer to approve, reject and edit.
THREE = [
    PAY,
    ("pay_invoice", {"invoice": "INV-8", "amount": 20}, "pay-2"),
    ("pay_invoice", {"invoice": "INV-9", "amount": 60}, "pay-3"),
]


class ScriptedChat(FunctionInvocationLayer, BaseChatClient):
    """A model that makes ``calls`` (name, arguments, call id) on its first turn, then
    reports what the tools answered: "Read: …", each answer in turn."""

    def __init__(self, calls: list[tuple[str, dict, str]]) -> None:
        super().__init__()
        self.calls = calls

    async def _inner_get_response(self, *, messages, **options) -> ChatResponse:
        read = [c.result for m in messages for c in m.contents if c.type == "function_result"]
        if read:
            said = "Read: " + " | ".join(str(result) for result in read)
            return ChatResponse(messages=[Message(role="assistant", contents=[said])])
        calls = [
            Content.from_function_call(call_id=call_id, name=name, arguments=json.dumps(args))
            for name, args, call_id in self.calls
        ]
        return ChatResponse(messages=[Message(role="assistant", contents=calls)])


def paying_tool(ovs: AsyncOversight, ledger: Path, lease_seconds: int = 60) -> SupervisedTool:
    """Pays into ``ledger`` (a line per payment, its idempotency key first); verified by
    reading it back."""

    async def paid(arguments: dict, key: str) -> Observed:
        lines = ledger.read_text().splitlines() if ledger.exists() else []
        for line in lines:
            if line.startswith(f"{key} "):
                invoice, amount = line.split()[1:]
                return Observed("applied", output={"paid": invoice, "amount": int(amount)})
        return Observed("absent")

    @supervised_tool(
        ovs, action="invoices.pay", rollback_kind="none", verify=paid, lease_seconds=lease_seconds
    )
    async def pay_invoice(invoice: str, amount: int, *, idempotency_key: str) -> dict:
        """Pay a supplier invoice."""
        record(ledger, f"{idempotency_key} {invoice} {amount}")
        return {"paid": invoice, "amount": amount}

    return pay_invoice


def record(ledger: Path, line: str) -> None:
    with ledger.open("a") as out:
        out.write(f"{line}\n")


def payments(ledger: Path) -> list[str]:
    """The ledger's payments, without their keys."""
    lines = ledger.read_text().splitlines() if ledger.exists() else []
    return [line.partition(" ")[2] for line in lines]


def paying_workflow(
    tool: SupervisedTool, calls=(PAY,), chat: ScriptedChat | None = None
) -> Workflow:
    """An agent with the paying tool (its model ``chat``, by default one making
    ``calls``), as a workflow of its own."""
    agent = Agent(client=chat or ScriptedChat(list(calls)), tools=[tool], name="payer")
    return WorkflowBuilder(start_executor=agent, name="payments").build()


def said(outputs: list[Any]) -> str:
    """What the agent said last in a workflow's outputs."""
    return outputs[-1].text


@dataclass
class Refund:
    amount: int
    reason: str

    def __post_init__(self) -> None:  # a rule its JSON Schema does not carry
        if self.amount <= 0:
            raise ValueError("a refund is a positive amount")


class Clerk(Executor):
    """Asks how much to refund on an order (a ``Refund``), then outputs it."""

    @handler
    async def start(self, order: str, ctx: WorkflowContext) -> None:
        await ctx.request_info(f"How much do we refund on {order}?", Refund)

    @response_handler
    async def refunded(self, asked: str, refund: Refund, ctx: WorkflowContext[Never, str]) -> None:
        await ctx.yield_output(f"Refund {refund.amount}: {refund.reason}")


class SignOff(Executor):
    """Asks for a sign-off (a ``bool``), then outputs whether it was given."""

    @handler
    async def start(self, order: str, ctx: WorkflowContext) -> None:
        await ctx.request_info(f"Ship {order}?", bool)

    @response_handler
    async def signed(self, asked: str, ok: bool, ctx: WorkflowContext[Never, str]) -> None:
        await ctx.yield_output("shipped" if ok else "held")


class Carrier(enum.Enum):
    POST = "post"
    COURIER = "courier"


class Dispatcher(Executor):
    """Asks which carrier ships an order (a ``Carrier``), then outputs it."""

    @handler
    async def start(self, order: str, ctx: WorkflowContext) -> None:
        await ctx.request_info({"question": f"Who ships {order}?", "weight": "2 kg"}, Carrier)

    @response_handler
    async def chosen(self, asked: dict, carrier: Carrier, ctx: WorkflowContext[Never, str]) -> None:
        await ctx.yield_output(f"by {carrier.value}")


def dispatching() -> Workflow:
    return WorkflowBuilder(start_executor=Dispatcher(id="dispatcher"), name="dispatch").build()


def plain_paying_workflow(ledger: Path) -> Workflow:
    """An agent whose tool needs an approval the framework asks for: not under
    Oversight's execution, only its sign-off."""

    @tool(approval_mode="always_require")
    def pay_invoice(invoice: str, amount: int) -> str:
        """Pay a supplier invoice."""
        record(ledger, f"plain {invoice} {amount}")
        return f"paid {invoice}"

    agent = Agent(client=ScriptedChat([PAY]), tools=[pay_invoice], name="payer")
    return WorkflowBuilder(start_executor=agent, name="plain-payments").build()


def refunds() -> Workflow:
    return WorkflowBuilder(start_executor=Clerk(id="clerk"), name="refunds").build()


def shipping() -> Workflow:
    return WorkflowBuilder(start_executor=SignOff(id="sign-off"), name="shipping").build()


class Asker(Executor):
    """Asks ``question`` (answered in words), then outputs the answer."""

    def __init__(self, question: Any) -> None:
        super().__init__(id="asker")
        self.question = question

    @handler
    async def start(self, order: str, ctx: WorkflowContext) -> None:
        await ctx.request_info(self.question, str)

    @response_handler
    async def answered(self, asked: Any, said: str, ctx: WorkflowContext[Never, str]) -> None:
        await ctx.yield_output(said)


def asking(question: Any) -> Workflow:
    return WorkflowBuilder(start_executor=Asker(question), name="asking").build()


def agent_process(base: str, token: str, run_id: int, folder, *options: str, **env: str):
    """tests/agent_framework_child.py as a child process, with ``options`` and ``env``."""
    return agent_child(
        "tests/agent_framework_child.py", base, token, str(run_id), folder, *options, **env
    )
