"""``supervise``, each adapter's one call for a run's whole life (#38, item 6), against
a live server with the adapters' scripted models: restarted after its agent paused (a
new process, as far as the adapter knows: new objects, the same run name), it goes on
where the agent stopped, follows the feed until the call is decided, returns what the
agent concluded and finishes the run; an admin's cancel ends it with None, the run left
cancelled and nothing made."""

import asyncio
from pathlib import Path

import pytest
from agents import Agent
from agents.testing import ScriptedModel as AgentsModel
from agents.testing import assistant_message, function_call
from claude_agent_sdk import ClaudeAgentOptions, create_sdk_mcp_server, tool
from langchain_core.messages import HumanMessage

from oversight_client import AsyncOversight, Oversight
from oversight_client.agent_framework import WorkflowDriver
from oversight_client.agent_framework import supervise as supervise_workflow
from oversight_client.claude_agent import Action, OversightAgent
from oversight_client.claude_agent import supervise as supervise_claude
from oversight_client.langgraph import OversightToolNode, Resumer
from oversight_client.langgraph import supervise as supervise_graph
from oversight_client.lifecycle import AgentFailed
from oversight_client.openai_agents import OversightRunner
from oversight_client.openai_agents import supervise as supervise_agent
from runs.actors import Actor
from runs.models import Operation, Run
from runs.services.runs import cancel_run
from tests.agent_framework_helpers import paying_tool, paying_workflow, payments
from tests.client_helpers import client_for, deciding, reviewing
from tests.fake_anthropic import FakeAnthropic, ScriptedModel, cli_env
from tests.helpers import decide_on
from tests.test_langgraph_node import graph_of, paid, pay, payment_tool
from tests.test_openai_agents import payer

pytest_plugins = ["tests.client_helpers"]
pytestmark = pytest.mark.timeout(120)
NAME = "invoices-7"


def run_named() -> Run:
    return Run.objects.get(external_id=NAME)


def cancelling(admin_user):
    """An admin cancels the run once its call waits for reviewers."""

    def cancel(operation: Operation) -> None:
        cancel_run(run=operation.run, actor=Actor.of_user(admin_user), reason="not this month")

    return reviewing(Operation.objects.filter(status="proposed").first, cancel, "the proposal")


async def open_named(aovs: AsyncOversight) -> int:
    session = await aovs.open_session(title="Pay INV-7", external_id=NAME)
    return (await aovs.start_run(session["id"], goal="Pay INV-7", external_id=NAME))["id"]


def assert_paid_once_and_completed() -> None:
    operation = Operation.objects.get()
    assert (operation.status, operation.run.status) == ("committed", "completed")


# --- LangGraph -------------------------------------------------------------------------


@pytest.fixture
def ovs(live_server, client_token) -> Oversight:
    return client_for(live_server, client_token, wait_timeout=30)


def graph(ovs: Oversight, ledger: Path):
    return graph_of(OversightToolNode([payment_tool(ovs, ledger)]), [pay("pay-1", "INV-7", 45)])


def test_langgraph_goes_on_after_a_restart(ovs, reviewer, tmp_path):
    ledger, app = tmp_path / "ledger", None
    app = graph(ovs, ledger)
    Resumer(app, ovs).start({"messages": [HumanMessage("Pay INV-7")]}, NAME)  # then stopped
    with deciding(reviewer, "pay-1"):
        done = supervise_graph(ovs, app, {"messages": []}, name=NAME)
    assert done["messages"][-1].content == 'success: {"paid": "INV-7", "amount": 45}'
    assert paid(ledger) == ["INV-7 45"]
    assert_paid_once_and_completed()


def test_langgraph_ends_with_none_when_the_run_is_cancelled(ovs, admin_user, tmp_path):
    ledger = tmp_path / "ledger"
    with cancelling(admin_user):
        done = supervise_graph(ovs, graph(ovs, ledger), {"messages": []}, name=NAME)
    assert done is None and paid(ledger) == []
    assert run_named().status == "cancelled"


# --- the OpenAI Agents SDK -------------------------------------------------------------


def test_openai_agents_goes_on_after_a_restart(aovs, reviewer):
    ledger = []
    run_id = asyncio.run(open_named(aovs))
    assert asyncio.run(OversightRunner(payer(aovs, ledger), aovs).run("Pay INV-7", run_id)) is None
    with deciding(reviewer, "pay-1"):
        done = asyncio.run(supervise_agent(aovs, payer(aovs, ledger), "Pay INV-7", name=NAME))
    assert done.final_output == "Reported."
    assert [entry for _, entry in ledger] == [("INV-7", 45)]
    assert_paid_once_and_completed()


def test_openai_agents_ends_with_none_when_the_run_is_cancelled(aovs, admin_user):
    ledger = []
    with cancelling(admin_user):
        done = asyncio.run(supervise_agent(aovs, payer(aovs, ledger), "Pay INV-7", name=NAME))
    assert done is None and ledger == []
    assert run_named().status == "cancelled"


# --- the Agent Framework ---------------------------------------------------------------


def test_agent_framework_goes_on_after_a_restart(aovs, reviewer, tmp_path):
    ledger = tmp_path / "ledger"
    tool = paying_tool(aovs, ledger)
    run_id = asyncio.run(open_named(aovs))
    driver = WorkflowDriver(lambda: paying_workflow(tool), aovs, tools=[tool])
    assert asyncio.run(driver.start("Pay INV-7", run_id)) is None  # then stopped
    with deciding(reviewer, "pay-1"):
        done = asyncio.run(
            supervise_workflow(
                aovs, lambda: paying_workflow(tool), "Pay INV-7", name=NAME, tools=[tool]
            )
        )
    assert done[-1].text == 'Read: {"paid": "INV-7", "amount": 45}'
    assert payments(ledger) == ["INV-7 45"]
    assert_paid_once_and_completed()


def test_agent_framework_ends_with_none_when_the_run_is_cancelled(aovs, admin_user, tmp_path):
    ledger = tmp_path / "ledger"
    tool = paying_tool(aovs, ledger)
    with cancelling(admin_user):
        done = asyncio.run(
            supervise_workflow(
                aovs, lambda: paying_workflow(tool), "Pay INV-7", name=NAME, tools=[tool]
            )
        )
    assert done is None and payments(ledger) == []
    assert run_named().status == "cancelled"


# --- the Claude Agent SDK --------------------------------------------------------------

PAY = "mcp__books__pay"
ACTIONS = {PAY: Action("invoices.pay", rollback_kind="none")}


@pytest.fixture
def claude(tmp_path):
    """The CLI's options, with a books server whose ``pay`` records its calls."""
    made = []

    @tool("pay", "Pay a supplier invoice", {"invoice": str, "amount": int})
    async def pay_invoice(args: dict) -> dict:
        made.append(args)
        return {"content": [{"type": "text", "text": f"paid {args['invoice']}"}]}

    model = ScriptedModel(PAY, {"invoice": "INV-7", "amount": 45}, tool_use_id="toolu_pay_1")
    with FakeAnthropic(model) as api:
        yield (
            made,
            ClaudeAgentOptions(
                env=cli_env(api, str(tmp_path)),
                cwd=tmp_path,
                mcp_servers={"books": create_sdk_mcp_server("books", tools=[pay_invoice])},
                tools=[],
            ),
        )


@pytest.mark.claude_cli
def test_claude_agent_goes_on_after_a_restart(aovs, reviewer, claude):
    made, options = claude
    run_id = asyncio.run(open_named(aovs))
    assert asyncio.run(OversightAgent(aovs, ACTIONS, options).run("Pay INV-7", run_id)) is None
    with deciding(reviewer, "toolu_pay_1"):
        done = asyncio.run(supervise_claude(aovs, options, "Pay INV-7", name=NAME, actions=ACTIONS))
    assert done.result == "Read: paid INV-7"
    assert made == [{"invoice": "INV-7", "amount": 45}]
    assert_paid_once_and_completed()


@pytest.mark.claude_cli
def test_claude_agent_ends_with_none_when_the_run_is_cancelled(aovs, admin_user, claude):
    made, options = claude
    with cancelling(admin_user):
        done = asyncio.run(supervise_claude(aovs, options, "Pay INV-7", name=NAME, actions=ACTIONS))
    assert done is None and made == []
    assert run_named().status == "cancelled"


# --- what the review found: other runs, a failed resume, a run closed before -----------


def test_a_supervised_run_s_agent_never_resumes_another_run(aovs, reviewer):
    """The token's feed carries every run's decisions: ``supervise`` resumes its own
    run only (before, another run's decided call was made with this run's agent)."""
    theirs, mine = [], []

    async def pause_another() -> None:
        session = await aovs.open_session(title="Another", external_id="another")
        other = await aovs.start_run(session["id"], goal="Pay", external_id="another")
        assert await OversightRunner(payer(aovs, theirs), aovs).run("Pay", other["id"]) is None

    asyncio.run(pause_another())
    decide_on(Operation.objects.get(call_id="pay-1", run__external_id="another"), reviewer)
    with deciding(reviewer, "pay-1"):  # this run's call, once proposed
        done = asyncio.run(supervise_agent(aovs, payer(aovs, mine), "Pay INV-7", name=NAME))
    assert done.final_output == "Reported."
    assert [entry for _, entry in mine] == [("INV-7", 45)] and theirs == []
    assert Operation.objects.get(run__external_id="another").status == "approved"


class Failing(AgentsModel):
    """The SDK's scripted model, failing once it has read its tool's answer."""

    async def get_response(self, *args, **kwargs):
        if self.calls:
            raise RuntimeError("the model's API is down")
        return await super().get_response(*args, **kwargs)


def test_a_resume_that_fails_ends_supervise_and_leaves_the_run_open(aovs, reviewer):
    ledger = []
    agent = payer(aovs, ledger)
    call = function_call("pay_invoice", {"invoice": "INV-7", "amount": 45}, call_id="pay-1")
    agent = Agent(
        name="payer", model=Failing([[call], [assistant_message("-")]]), tools=agent.tools
    )
    with deciding(reviewer, "pay-1"), pytest.raises(AgentFailed, match="the model's API is down"):
        asyncio.run(supervise_agent(aovs, agent, "Pay INV-7", name=NAME))
    assert run_named().status in ("running", "waiting")  # supervised again, it goes on


def test_agent_framework_does_not_follow_a_run_closed_before_the_restart(aovs, tmp_path):
    ledger = tmp_path / "ledger"
    tool = paying_tool(aovs, ledger)
    run_id = asyncio.run(open_named(aovs))
    driver = WorkflowDriver(lambda: paying_workflow(tool), aovs, tools=[tool])
    assert asyncio.run(driver.start("Pay INV-7", run_id)) is None
    asyncio.run(aovs.finish(run_id, "failed", "given up by hand"))
    restarted = supervise_workflow(
        aovs, lambda: paying_workflow(tool), "Pay INV-7", name=NAME, tools=[tool]
    )
    assert asyncio.run(asyncio.wait_for(restarted, 30)) is None
    assert payments(ledger) == []
