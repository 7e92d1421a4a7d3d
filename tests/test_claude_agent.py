"""The Claude Agent SDK adapter against a live server, with the CLI the SDK bundles
talking to a scripted model on loopback (tests/fake_anthropic.py: no key, no network).
The model calls an in-process MCP tool, ``pay``; the tool runs only once Oversight
approved the call, with the approved input, and whatever the model then reads is what
it says back (``Read: …``)."""

import asyncio
from dataclasses import replace
from datetime import timedelta

import pytest
from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, create_sdk_mcp_server, query, tool
from django.utils import timezone

from oversight_client import AsyncOversight
from oversight_client.claude_agent import Action, OversightAgent, OversightGate
from oversight_client.claude_agent.agent import LOST
from oversight_client.claude_agent.gate import MADE_ALREADY, MARK
from oversight_client.cursor import FileCursor
from runs.actors import Actor
from runs.models import Decision, Message, Operation, Run
from runs.services.decisions import expire_if_due
from runs.services.runs import cancel_run
from tests.client_helpers import deciding, reviewing
from tests.fake_anthropic import FakeAnthropic, ScriptedModel, cli_env
from tests.helpers import decide_on
from tests.outage import Outage

pytest_plugins = ["tests.client_helpers"]
pytestmark = pytest.mark.claude_cli

PAY = "mcp__books__pay"
ACTIONS = {PAY: Action("invoices.pay", rollback_kind="none", summary="Pay a supplier invoice")}
ASKED = {"invoice": "INV-7", "amount": 45}


@pytest.fixture
def run_id(aovs) -> int:
    async def start() -> int:
        session = await aovs.open_session(title="Supplier payments")
        return (await aovs.start_run(session["id"], goal="Pay INV-7"))["id"]

    return asyncio.run(start())


@pytest.fixture
def paid() -> list[dict]:
    return []


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel(PAY, ASKED, tool_use_id="toolu_pay_1")


@pytest.fixture
def options(model, paid, tmp_path):
    """The CLI's options with the books MCP server, whose ``pay`` records its calls."""

    @tool("pay", "Pay a supplier invoice", {"invoice": str, "amount": int})
    async def pay(args: dict) -> dict:
        if args["amount"] <= 0:
            raise ValueError("the bank refuses a payment of 0 or less")
        paid.append(args)
        return {"content": [{"type": "text", "text": f"paid {args['invoice']}: {args['amount']}"}]}

    with FakeAnthropic(model) as api:
        yield ClaudeAgentOptions(
            env=cli_env(api, str(tmp_path)),
            cwd=tmp_path,
            mcp_servers={"books": create_sdk_mcp_server("books", tools=[pay])},
            tools=[],
        )


def ask(options: ClaudeAgentOptions, **gated) -> ResultMessage:
    async def go() -> ResultMessage:
        messages = [m async for m in query(prompt="Pay INV-7", options=replace(options, **gated))]
        return next(m for m in messages if isinstance(m, ResultMessage))

    return asyncio.run(go())


def gated(gate: OversightGate) -> dict:
    return {"hooks": gate.hooks()}


def test_an_approved_call_runs_once_with_the_approved_input(aovs, run_id, options, paid, reviewer):
    gate = OversightGate(aovs, run_id, ACTIONS)
    with deciding(reviewer, "toolu_pay_1"):
        result = ask(options, **gated(gate))
    assert paid == [ASKED]
    assert result.result == "Read: paid INV-7: 45"
    operation = Operation.objects.get(call_id="toolu_pay_1")
    assert (operation.status, operation.action, operation.summary) == (
        "committed",
        "invoices.pay",
        "Pay a supplier invoice",
    )
    assert operation.result["output"] == [{"type": "text", "text": "paid INV-7: 45"}]


def test_a_rejection_reaches_the_model_and_the_tool_never_runs(
    aovs, run_id, options, paid, reviewer
):
    gate = OversightGate(aovs, run_id, ACTIONS)
    with deciding(reviewer, "toolu_pay_1", Decision.Kind.REJECT, comment="INV-7 has a credit note"):
        result = ask(options, **gated(gate))
    assert paid == []
    # The CLI prefixes a hook's reason ("PreToolUse:… hook error: "): the model reads both.
    assert result.result.endswith(": A reviewer rejected this call: INV-7 has a credit note")


def test_an_edited_input_is_what_runs_and_the_model_is_told(
    aovs, run_id, options, paid, reviewer, model
):
    gate = OversightGate(aovs, run_id, ACTIONS)
    edit = {"invoice": "INV-7", "amount": 40}
    with deciding(reviewer, "toolu_pay_1", Decision.Kind.EDIT, arguments=edit):
        result = ask(options, **gated(gate))
    assert paid == [edit]
    assert result.result == "Read: paid INV-7: 40"
    told = 'A reviewer changed your arguments to {"invoice": "INV-7", "amount": 40}.'
    assert told in str(model.requests[-1]["messages"])


def test_can_use_tool_asks_oversight_too(aovs, run_id, options, paid, reviewer, model):
    gate = OversightGate(aovs, run_id, ACTIONS)
    with deciding(reviewer, "toolu_pay_1", Decision.Kind.REJECT, comment="not this month"):
        result = ask(options, can_use_tool=gate.can_use_tool, hooks=gate.reporting_hooks())
    assert paid == []
    assert result.result == "Read: A reviewer rejected this call: not this month"

    model.tool_use_id = "toolu_pay_2"  # asked again, approved this time
    with deciding(reviewer, "toolu_pay_2"):
        result = ask(options, can_use_tool=gate.can_use_tool, hooks=gate.reporting_hooks())
    assert paid == [ASKED]
    assert Operation.objects.get(call_id="toolu_pay_2").status == "committed"


def test_a_call_nobody_decides_in_time_fails_closed(aovs, run_id, options, paid):
    gate = OversightGate(aovs, run_id, ACTIONS, timeout=1)
    result = ask(options, **gated(gate))
    assert paid == []
    assert result.result.endswith(": Nobody decided on this call in time: it was not made.")
    assert Operation.objects.get(call_id="toolu_pay_1").status == "cancelled"  # withdrawn


def test_a_cancelled_run_denies_the_waiting_call(aovs, run_id, options, paid, admin_user):
    gate = OversightGate(aovs, run_id, ACTIONS)

    def cancel() -> None:
        cancel_run(run=Run.objects.get(pk=run_id), actor=Actor.of_user(admin_user), reason="stop")

    proposed = Operation.objects.filter(call_id="toolu_pay_1", status="proposed")
    with reviewing(proposed.first, lambda op: cancel(), "the proposal"):
        result = ask(options, **gated(gate))
    assert paid == []
    assert ": This call was cancelled (" in result.result


def test_an_unreachable_oversight_denies_the_call_once_the_wait_is_over(options, paid):
    dead = AsyncOversight("http://127.0.0.1:9", "token", retries=1, backoff=0.01, timeout=2)
    result = ask(options, **gated(OversightGate(dead, 1, ACTIONS, timeout=2)))
    assert paid == []
    assert result.result.endswith(
        ": This call was not made: Oversight could not be reached to ask a reviewer."
    )


def test_a_hook_that_raises_blocks_the_call(aovs, run_id, options, paid):
    """The hook is registered with on_failure="block": whatever goes wrong in it, the
    CLI blocks the call (its default, continue, would run the tool)."""

    class Broken(OversightGate):
        async def decide(self, *args, **kwargs):
            raise RuntimeError("the gate is broken")

    result = ask(options, **gated(Broken(aovs, run_id, ACTIONS)))
    assert paid == []
    assert 'blocking because onFailure is "block"' in result.result


def test_a_tool_that_fails_after_approval_is_left_to_a_person(
    aovs, run_id, options, paid, reviewer, model
):
    """A failed tool may have done part of its work, and Oversight cannot look: the
    call is reported uncertain and a person is alerted; the model reads the error."""
    model.input = {"invoice": "INV-7", "amount": 0}
    with deciding(reviewer, "toolu_pay_1"):
        result = ask(options, **gated(OversightGate(aovs, run_id, ACTIONS)))
    assert result.result == "Read: the bank refuses a payment of 0 or less"
    operation = Operation.objects.get(call_id="toolu_pay_1")
    assert operation.status == "alerted"
    assert "the bank refuses a payment of 0 or less" in operation.status_reason


def test_a_call_allowed_once_is_never_allowed_again(aovs, run_id, reviewer):
    """Asked again for a call it allowed (its agent stopped before the report), the gate
    denies it: the call may have been made, and Oversight cannot check a CLI tool."""

    def decide(gate: OversightGate):
        return asyncio.run(gate.decide(PAY, ASKED, "toolu_pay_1"))

    with deciding(reviewer, "toolu_pay_1"):
        assert decide(OversightGate(aovs, run_id, ACTIONS)).behavior == "allow"
    again = decide(OversightGate(aovs, run_id, ACTIONS, lease_seconds=1))
    assert (again.behavior, again.reason) == ("deny", MADE_ALREADY)
    assert Operation.objects.get(call_id="toolu_pay_1").status == "in_flight"


def test_a_tool_without_an_action_is_denied(aovs, run_id, options, paid):
    result = ask(options, **gated(OversightGate(aovs, run_id, {})))
    assert paid == []
    assert result.result.endswith(
        ": This tool is not allowed here: no Oversight action is configured for it."
    )
    assert not Operation.objects.exists()


def test_a_hostile_input_over_the_server_s_limits_is_refused_to_the_model(
    aovs, run_id, options, paid, model
):
    model.input = {"invoice": "x" * 300_000, "amount": 1}
    result = ask(options, **gated(OversightGate(aovs, run_id, ACTIONS)))
    assert paid == []
    assert ": This call was not made: arguments: " in result.result  # the server's reason
    assert not Operation.objects.exists()


# --- the durable path: the hook defers, the agent resumes the session ------------------


def agent_for(aovs, options, tmp_path) -> OversightAgent:
    return OversightAgent(aovs, ACTIONS, options, cursor=FileCursor(tmp_path / "cursor"))


def test_a_deferred_call_resumes_with_the_approved_input_once_decided(
    aovs, run_id, options, paid, reviewer, tmp_path
):
    agent = agent_for(aovs, options, tmp_path)
    assert asyncio.run(agent.run("Pay INV-7", run_id)) is None  # deferred
    assert paid == []
    stored = Message.objects.filter(run_id=run_id, payload__data__has_key=MARK).get()
    assert stored.payload["data"][MARK]["call"] == "toolu_pay_1"
    assert asyncio.run(agent.poll()) == 0  # nothing decided yet

    edit = {"invoice": "INV-7", "amount": 40}
    decide_on(
        Operation.objects.get(call_id="toolu_pay_1"), reviewer, Decision.Kind.EDIT, arguments=edit
    )
    restarted = agent_for(aovs, options, tmp_path)  # a new process, say: the cursor holds
    assert asyncio.run(restarted.poll()) == 1
    assert paid == [edit]
    assert restarted.results[run_id].result.startswith("Read: ")
    assert Operation.objects.get(call_id="toolu_pay_1").status == "committed"
    assert asyncio.run(restarted.poll()) == 0  # resumed once


def test_a_deferred_call_rejected_reaches_the_model(
    aovs, run_id, options, paid, reviewer, tmp_path, model
):
    agent = agent_for(aovs, options, tmp_path)
    assert asyncio.run(agent.run("Pay INV-7", run_id)) is None
    decide_on(
        Operation.objects.get(call_id="toolu_pay_1"), reviewer, Decision.Kind.REJECT, comment="paid"
    )
    assert asyncio.run(agent.resume(run_id)) is not None
    assert paid == []
    assert "A reviewer rejected this call: paid" in str(model.requests[-1]["messages"])


def test_a_deferred_call_that_expires_is_denied_on_resume(
    aovs, run_id, options, paid, tmp_path, model
):
    agent = agent_for(aovs, options, tmp_path)
    assert asyncio.run(agent.run("Pay INV-7", run_id)) is None
    assert expire_if_due(
        Operation.objects.get(call_id="toolu_pay_1"), timezone.now() + timedelta(days=9)
    )
    assert asyncio.run(agent.poll()) == 1  # resumed: the hook denies, saying why
    assert paid == []
    assert Operation.objects.get(call_id="toolu_pay_1").status == "expired"
    assert "Nobody decided on this call in time: it was not made." in str(
        model.requests[-1]["messages"]
    )


def test_a_cancelled_run_is_never_resumed(aovs, run_id, options, paid, admin_user, tmp_path):
    agent = agent_for(aovs, options, tmp_path)
    assert asyncio.run(agent.run("Pay INV-7", run_id)) is None
    cancel_run(run=Run.objects.get(pk=run_id), actor=Actor.of_user(admin_user), reason="stop")
    assert asyncio.run(agent.poll()) == 0
    assert paid == []


def test_calls_side_by_side_defer_one_and_withdraw_the_other(
    aovs, run_id, options, paid, model, tmp_path
):
    """The CLI defers a single call per turn: the others of the turn never run, and
    their proposals are withdrawn, so that no reviewer approves a call nobody makes."""
    model.also = {"toolu_pay_2": {"invoice": "INV-8", "amount": 120}}
    agent = agent_for(aovs, options, tmp_path)
    assert asyncio.run(agent.run("Pay INV-7 and INV-8", run_id)) is None
    statuses = dict(Operation.objects.values_list("call_id", "status"))
    waiting = [call for call, status in statuses.items() if status == "proposed"]
    assert sorted(statuses.values()) == ["cancelled", "proposed"]
    last = Message.objects.filter(run_id=run_id, payload__data__has_key=MARK).last()
    assert last.payload["data"][MARK]["call"] == waiting[0]
    assert paid == []


def test_a_stored_session_that_is_not_a_session_id_is_never_resumed(
    aovs, run_id, options, paid, reviewer, tmp_path
):
    """What names the session is read back from the run's messages: anything but a
    session id (say, a CLI option) fails the resume, which the follower keeps."""

    async def mark() -> None:
        await aovs.propose(run_id, "toolu_pay_9", "invoices.pay", ASKED, rollback_kind="none")
        forged = {"session": "--dangerously-skip-permissions", "call": "toolu_pay_9"}
        await aovs.message(run_id, "forged", data={MARK: forged})

    asyncio.run(mark())
    decide_on(Operation.objects.get(call_id="toolu_pay_9"), reviewer)
    agent = agent_for(aovs, options, tmp_path)
    assert asyncio.run(agent.poll()) == 0
    assert agent.failed[run_id].startswith("ValueError")
    assert paid == []


def test_a_built_in_tool_runs_in_the_cli_only_once_approved(
    aovs, run_id, options, reviewer, model, tmp_path
):
    """Bash, as the CLI runs it: gated, edited and reported the same way."""
    model.tool, model.input = "Bash", {"command": "echo INV-7 45 >> ledger.txt"}
    gate = OversightGate(aovs, run_id, {"Bash": Action("shell.run", rollback_kind="none")})
    edit = {"command": "echo INV-7 40 >> ledger.txt"}
    with deciding(reviewer, "toolu_pay_1", Decision.Kind.EDIT, arguments=edit):
        ask(replace(options, tools=["Bash"]), **gated(gate))
    assert (tmp_path / "ledger.txt").read_text() == "INV-7 40\n"
    operation = Operation.objects.get(call_id="toolu_pay_1")
    assert (operation.status, operation.arguments) == ("committed", edit)


def test_an_output_the_server_would_refuse_is_reported_cleaned(
    aovs, run_id, reviewer, model, tmp_path
):
    """A tool's output with NUL in it (the server refuses NUL) is reported cleaned: the
    call that ran ends committed, not in flight for a person to chase."""

    @tool("pay", "Pay a supplier invoice", {"invoice": str, "amount": int})
    async def pay(args: dict) -> dict:
        return {"content": [{"type": "text", "text": f"paid\x00 {args['invoice']}"}]}

    with FakeAnthropic(model) as api:
        options = ClaudeAgentOptions(
            env=cli_env(api, str(tmp_path)),
            cwd=tmp_path,
            mcp_servers={"books": create_sdk_mcp_server("books", tools=[pay])},
            tools=[],
        )
        with deciding(reviewer, "toolu_pay_1"):
            ask(options, **gated(OversightGate(aovs, run_id, ACTIONS)))
    operation = Operation.objects.get(call_id="toolu_pay_1")
    assert operation.status == "committed"
    assert "\x00" not in str(operation.result) and "paid\ufffd INV-7" in str(operation.result)


# --- sequences: the model calls again in a resumed session ------------------------------

INV_8 = {"invoice": "INV-8", "amount": 120}


def resumed(agent: OversightAgent, run_id: int) -> ResultMessage | None:
    return asyncio.run(agent.resume(run_id))


def test_every_call_of_a_resumed_session_waits_for_reviewers_and_runs_once(
    aovs, run_id, options, paid, reviewer, tmp_path, model
):
    """The second call, made by the model in the session resumed for the first, is
    deferred in turn (the CLI used to drop it as "[Tool result missing due to internal
    error]", the run ended, and its proposal waited with nobody behind it)."""
    model.then = [("toolu_pay_2", INV_8), ("toolu_pay_3", {"invoice": "INV-9", "amount": 5})]
    agent = agent_for(aovs, options, tmp_path)
    assert asyncio.run(agent.run("Pay INV-7, INV-8 and INV-9", run_id)) is None
    for call_id in ("toolu_pay_1", "toolu_pay_2"):
        decide_on(Operation.objects.get(call_id=call_id), reviewer)
        assert resumed(agent, run_id) is None  # the next call waits
        assert Operation.objects.get(call_id=call_id).status == "committed"
    decide_on(Operation.objects.get(call_id="toolu_pay_3"), reviewer)
    assert resumed(agent, run_id).result == "Read: paid INV-9: 5"
    assert paid == [ASKED, INV_8, {"invoice": "INV-9", "amount": 5}]
    assert set(Operation.objects.values_list("status", flat=True)) == {"committed"}
    assert "missing due to internal error" not in str(model.requests)


def test_a_retry_after_a_rejection_waits_for_reviewers_too(
    aovs, run_id, options, paid, reviewer, tmp_path, model
):
    model.then = [("toolu_pay_2", {"invoice": "INV-7", "amount": 40})]
    agent = agent_for(aovs, options, tmp_path)
    assert asyncio.run(agent.run("Pay INV-7", run_id)) is None
    decide_on(
        Operation.objects.get(call_id="toolu_pay_1"),
        reviewer,
        Decision.Kind.REJECT,
        comment="INV-7 has a 5 credit note",
    )
    assert resumed(agent, run_id) is None  # the model read why, and asks again
    assert "A reviewer rejected this call: INV-7 has a 5 credit note" in str(model.requests[-1])
    decide_on(Operation.objects.get(call_id="toolu_pay_2"), reviewer)
    assert resumed(agent, run_id).result == "Read: paid INV-7: 40"
    assert paid == [{"invoice": "INV-7", "amount": 40}]


def test_a_second_call_waiting_when_the_agent_restarts_is_resumed_once_decided(
    aovs, run_id, options, paid, reviewer, tmp_path, model
):
    model.then = [("toolu_pay_2", INV_8)]
    agent = agent_for(aovs, options, tmp_path)
    assert asyncio.run(agent.run("Pay INV-7 and INV-8", run_id)) is None
    decide_on(Operation.objects.get(call_id="toolu_pay_1"), reviewer)
    assert resumed(agent, run_id) is None

    restarted = agent_for(aovs, options, tmp_path)
    assert asyncio.run(restarted.recover("Pay INV-7 and INV-8", run_id)) is None  # waits
    decide_on(Operation.objects.get(call_id="toolu_pay_2"), reviewer)
    assert asyncio.run(restarted.poll()) == 1
    assert restarted.results[run_id].result == "Read: paid INV-8: 120"
    assert paid == [ASKED, INV_8]


# --- Oversight out of reach, and a resume with nothing deferred -------------------------


def test_a_call_made_while_oversight_is_out_of_reach_waits_for_it_then_for_reviewers(
    live_server, client_token, run_id, options, paid, reviewer, tmp_path, model
):
    """The hook asks again (the proposal is idempotent by its call id) until Oversight
    answers: the call is proposed once and the session named, so that its decision
    resumes it (before, the hook deferred with nothing proposed and nothing named, and
    the agent waited forever)."""
    with Outage(live_server.url) as outage:
        cut_off = AsyncOversight(outage.url, client_token, retries=1, backoff=0.01, timeout=5)
        agent = agent_for(cut_off, options, tmp_path)
        asked = model.reply

        def cut_when_asked(body: dict) -> list[dict]:
            if not model.requests:  # the model's first answer: its call to pay
                outage.cut_for(3)
            return asked(body)

        model.reply = cut_when_asked
        assert asyncio.run(agent.run("Pay INV-7", run_id)) is None
        assert outage.cuts == 1
        operation = Operation.objects.get(call_id="toolu_pay_1")
        assert operation.status == "proposed"
        named = Message.objects.filter(run_id=run_id, payload__data__has_key=MARK).last()
        assert named.payload["data"][MARK]["call"] == "toolu_pay_1"
        decide_on(operation, reviewer)
        assert asyncio.run(agent.poll()) == 1
    assert paid == [ASKED]
    assert Operation.objects.get(call_id="toolu_pay_1").status == "committed"


def test_a_session_with_no_call_to_go_on_with_is_told_so_and_never_hangs(
    aovs, run_id, options, paid, reviewer, tmp_path, model
):
    """Resumed with no prompt, a CLI whose session has no deferred call (it ended, say)
    would wait for input forever: past ``quiet_seconds`` it is told what came of the
    call, and a call approved for it, which it will never make, is withdrawn."""

    async def ended_session() -> str:
        messages = [m async for m in query(prompt="Pay INV-7", options=options)]
        return next(m for m in messages if isinstance(m, ResultMessage)).session_id

    session = asyncio.run(ended_session())
    asyncio.run(aovs.propose(run_id, "toolu_pay_9", "invoices.pay", ASKED, rollback_kind="none"))
    asyncio.run(
        aovs.message(run_id, "named", data={MARK: {"session": session, "call": "toolu_pay_9"}})
    )
    decide_on(Operation.objects.get(call_id="toolu_pay_9"), reviewer)
    agent = agent_for(aovs, options, tmp_path)
    agent.quiet_seconds = 1
    assert asyncio.run(agent.poll()) == 1
    told = "Your tool call toolu_pay_9 was interrupted when the agent stopped. It was not made"
    assert told in str(model.requests[-1]["messages"][-1])
    assert agent.results[run_id].result.startswith("Read: ")
    withdrawn = Operation.objects.get(call_id="toolu_pay_9")
    assert (withdrawn.status, withdrawn.status_reason) == ("cancelled", LOST)


def test_a_resumed_call_that_takes_long_is_no_session_without_a_deferred_call(
    aovs, run_id, paid, reviewer, tmp_path, model
):
    """The CLI says nothing while the deferred call's hook and tool run: its hook being
    asked is what tells the agent the session went on (not told "not made" past
    ``quiet_seconds``, which would invite the payment twice), and the next call is
    deferred in turn."""
    model.then = [("toolu_pay_2", INV_8)]

    @tool("pay", "Pay a supplier invoice", {"invoice": str, "amount": int})
    async def slow_pay(args: dict) -> dict:
        await asyncio.sleep(6)  # a payment system that takes its time
        paid.append(args)
        return {"content": [{"type": "text", "text": f"paid {args['invoice']}"}]}

    with FakeAnthropic(model) as api:
        options = ClaudeAgentOptions(
            env=cli_env(api, str(tmp_path)),
            cwd=tmp_path,
            mcp_servers={"books": create_sdk_mcp_server("books", tools=[slow_pay])},
            tools=[],
        )
        agent = agent_for(aovs, options, tmp_path)
        agent.quiet_seconds = 3  # past the CLI's start, short of the payment's time
        assert asyncio.run(agent.run("Pay INV-7 and INV-8", run_id)) is None
        decide_on(Operation.objects.get(call_id="toolu_pay_1"), reviewer)
        assert resumed(agent, run_id) is None  # INV-8 waits for reviewers
    assert paid == [ASKED]
    assert "was interrupted when the agent stopped" not in str(model.requests)
    assert Operation.objects.get(call_id="toolu_pay_2").status == "proposed"
