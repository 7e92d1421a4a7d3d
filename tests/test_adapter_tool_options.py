"""Every framework adapter's tool decorator takes the options of ``Oversight.tool`` and
forwards them, against a live server: a tool declared through LangGraph, the OpenAI
Agents SDK or the Agent Framework, with ``deduplicates`` (whether a takeover may fire
the effect again) and an ``executor``, is approved and made, and the server recorded
both as they were declared."""

import asyncio
from pathlib import Path

import pytest
from agents import Agent, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from oversight_client import Observed
from oversight_client.agent_framework import WorkflowDriver
from oversight_client.agent_framework import supervised_tool as agent_framework_tool
from oversight_client.langgraph import supervised_tool as langgraph_tool
from oversight_client.openai_agents import OversightRunner, supervised_function_tool
from runs.models import Operation
from tests.agent_framework_helpers import PAY, paying_workflow
from tests.client_helpers import deciding
from tests.helpers import decide_on

pytest_plugins = ["tests.client_helpers"]

set_tracing_disabled(True)

DECLARED = {"deduplicates": True, "executor": "ledger-bot"}
OPTIONS = {"action": "invoices.pay", "rollback_kind": "none", **DECLARED}


def paying(ledger: Path):
    """The function under oversight (it writes ``ledger``) and its ``verify``."""

    def pay_invoice(invoice: str, amount: int, *, idempotency_key: str) -> dict:
        """Pay a supplier invoice."""
        with ledger.open("a") as out:
            out.write(f"{idempotency_key} {invoice} {amount}\n")
        return {"paid": invoice, "amount": amount}

    def paid(arguments: dict, key: str) -> Observed:
        lines = ledger.read_text().splitlines() if ledger.exists() else []
        found = any(line.startswith(f"{key} ") for line in lines)
        return Observed("applied" if found else "absent")

    return pay_invoice, paid


def through_langgraph(ovs, aovs, reviewer, ledger: Path) -> None:
    """As LangGraph's ``ToolNode`` calls it: the call waits for the reviewer."""
    pay_invoice, paid = paying(ledger)
    tool = langgraph_tool(ovs, verify=paid, **OPTIONS)(pay_invoice)
    name, args, call_id = PAY
    call = {"type": "tool_call", "name": name, "args": args, "id": call_id}
    with deciding(reviewer, call_id):
        tool.invoke(call, {"configurable": {"thread_id": "options-thread"}})


def through_openai_agents(ovs, aovs, reviewer, ledger: Path) -> None:
    """An ``OversightRunner``'s run pauses on the call, and resumes once it is approved."""
    pay_invoice, paid = paying(ledger)
    tool = supervised_function_tool(aovs, verify=paid, **OPTIONS)(pay_invoice)
    name, args, call_id = PAY
    model = ScriptedModel(
        [[function_call(name, args, call_id=call_id)], [assistant_message("Paid.")]]
    )
    runner = OversightRunner(Agent(name="payer", model=model, tools=[tool]), aovs)
    run_id = asyncio.run(started(aovs))
    assert asyncio.run(runner.run("Pay INV-7", run_id)) is None
    decide_on(Operation.objects.get(call_id=call_id), reviewer)
    assert asyncio.run(runner.poll(wait=5)) == 1


def through_agent_framework(ovs, aovs, reviewer, ledger: Path) -> None:
    """A ``WorkflowDriver``'s workflow pauses on the call, and resumes once it is approved."""
    pay_invoice, paid = paying(ledger)
    tool = agent_framework_tool(aovs, verify=paid, **OPTIONS)(pay_invoice)
    driver = WorkflowDriver(lambda: paying_workflow(tool), aovs, tools=[tool])
    assert asyncio.run(driver.start("Pay INV-7", asyncio.run(started(aovs)))) is None
    decide_on(Operation.objects.get(call_id=PAY[2]), reviewer)
    assert asyncio.run(driver.poll(wait=5)) == 1


async def started(aovs) -> int:
    session = await aovs.open_session(title="Payments")
    return (await aovs.start_run(session["id"], goal="Pay the supplier"))["id"]


@pytest.mark.parametrize(
    "through", [through_langgraph, through_openai_agents, through_agent_framework]
)
def test_an_adapter_s_tool_is_carried_out_with_every_option_it_declared(
    through, ovs, aovs, reviewer, tmp_path
):
    ledger = tmp_path / "ledger"
    through(ovs, aovs, reviewer, ledger)
    operation = Operation.objects.get(call_id=PAY[2])
    intent = operation.checkpoints.get(event="operation.intent")
    assert (operation.status, operation.lease_owner) == ("committed", "ledger-bot")
    assert intent.state["deduplicates"] is True
    assert len(ledger.read_text().splitlines()) == 1
