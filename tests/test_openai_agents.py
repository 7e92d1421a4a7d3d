"""The OpenAI Agents SDK adapter against a live server, with the SDK's scripted model
(no key, no network): a call waiting for reviewers interrupts the run; approved, it runs
once with the approved arguments; rejected, the model reads the reviewer's reason."""

import asyncio
import json
from datetime import timedelta

import pytest
from agents import Agent, Runner, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from django.utils import timezone

from oversight_client import AsyncOversight, Observed
from oversight_client.cursor import FileCursor
from oversight_client.openai_agents import (
    OversightRunner,
    in_run,
    question_tool,
    supervised_function_tool,
)
from oversight_client.openai_agents.runner import STATE
from runs.actors import Actor
from runs.models import ApprovalPolicy, CheckpointArtifact, Decision, HumanRequest, Operation, Run
from runs.services import requests as human_requests
from runs.services.decisions import expire_if_due
from runs.services.runs import cancel_run
from tests.helpers import decide_on

pytest_plugins = ["tests.client_helpers"]

set_tracing_disabled(True)


@pytest.fixture
def run_id(aovs) -> int:
    async def start() -> int:
        session = await aovs.open_session(title="Payments", external_id="oa-thread")
        return (await aovs.start_run(session["id"], goal="Pay the supplier"))["id"]

    return asyncio.run(start())


def payer(aovs: AsyncOversight, ledger: list) -> Agent:
    async def paid(arguments: dict, key: str) -> Observed:
        return Observed("applied") if key in [k for k, _ in ledger] else Observed("absent")

    @supervised_function_tool(aovs, action="invoices.pay", rollback_kind="none", verify=paid)
    async def pay_invoice(invoice: str, amount: int, *, idempotency_key: str) -> dict:
        """Pay a supplier invoice."""
        ledger.append((idempotency_key, (invoice, amount)))
        return {"paid": invoice, "amount": amount}

    model = ScriptedModel(
        [
            [function_call("pay_invoice", {"invoice": "INV-7", "amount": 45}, call_id="pay-1")],
            [assistant_message("Reported.")],
        ]
    )
    return Agent(name="payer", model=model, tools=[pay_invoice])


def tool_output(result) -> str:
    return next(i.output for i in result.new_items if i.type == "tool_call_output_item")


def run_until_decided(agent: Agent, run_id: int, decide) -> tuple:
    async def go():
        with in_run(run_id):
            paused = await Runner.run(agent, "Pay INV-7")
        assert [i.raw_item.call_id for i in paused.interruptions] == ["pay-1"]
        await asyncio.to_thread(decide)
        state = paused.to_state()
        return state, paused.interruptions[0]

    return asyncio.run(go())


def resume(agent: Agent, run_id: int, state):
    async def go():
        with in_run(run_id):
            return await Runner.run(agent, state)

    return asyncio.run(go())


def test_an_approved_call_runs_once_after_the_interruption(aovs, run_id, reviewer):
    ledger = []
    agent = payer(aovs, ledger)
    state, item = run_until_decided(
        agent, run_id, lambda: decide_on(Operation.objects.get(call_id="pay-1"), reviewer)
    )
    assert ledger == []
    state.approve(item)
    done = resume(agent, run_id, state)
    assert json.loads(tool_output(done)) == {"paid": "INV-7", "amount": 45}
    assert done.final_output == "Reported."
    assert [entry for _, entry in ledger] == [("INV-7", 45)]
    assert Operation.objects.get(call_id="pay-1").status == "committed"


def test_an_edit_reaches_the_model_in_the_tool_output(aovs, run_id, reviewer):
    ledger = []
    agent = payer(aovs, ledger)
    edited = {"invoice": "INV-7", "amount": 40}
    state, item = run_until_decided(
        agent,
        run_id,
        lambda: decide_on(
            Operation.objects.get(call_id="pay-1"), reviewer, Decision.Kind.EDIT, arguments=edited
        ),
    )
    state.approve(item)
    done = resume(agent, run_id, state)
    assert tool_output(done) == (
        'A reviewer changed your arguments to {"invoice": "INV-7", "amount": 40}. '
        'Result: {"paid": "INV-7", "amount": 40}'
    )
    assert [entry for _, entry in ledger] == [("INV-7", 40)]


def test_the_runner_keeps_the_paused_state_on_the_run_and_a_rejection_reaches_the_model(
    aovs, run_id, reviewer
):
    ledger = []
    runner = OversightRunner(payer(aovs, ledger), aovs)
    assert asyncio.run(runner.run("Pay INV-7", run_id)) is None  # waits for reviewers
    assert asyncio.run(runner.resume(run_id)) is None  # nothing decided yet
    stored = CheckpointArtifact.objects.get(checkpoint__run_id=run_id)
    assert (stored.name, stored.media_type) == (STATE, "application/json")

    decide_on(
        Operation.objects.get(call_id="pay-1"),
        reviewer,
        Decision.Kind.REJECT,
        comment="INV-7 has a credit note",
    )
    done = asyncio.run(runner.resume(run_id))
    assert tool_output(done) == "A reviewer rejected this call: INV-7 has a credit note"
    assert done.final_output == "Reported."
    assert ledger == []
    assert asyncio.run(runner.resume(run_id)) is None  # resumed once: nothing left


def test_the_runner_follows_the_feed_and_resumes_once_decided(aovs, run_id, reviewer, tmp_path):
    ledger = []
    runner = OversightRunner(payer(aovs, ledger), aovs, FileCursor(tmp_path / "cursor"))
    assert asyncio.run(runner.run("Pay INV-7", run_id)) is None
    assert asyncio.run(runner.poll()) == 0  # nothing decided
    decide_on(Operation.objects.get(call_id="pay-1"), reviewer)
    assert asyncio.run(runner.poll(wait=5)) == 1
    assert runner.results[run_id].final_output == "Reported."
    assert [entry for _, entry in ledger] == [("INV-7", 45)]
    assert FileCursor(tmp_path / "cursor").load() == runner.feed.after
    assert asyncio.run(runner.poll()) == 0  # its committed events resume nothing


def test_the_model_never_sees_the_idempotency_key(aovs):
    tool = payer(aovs, []).tools[0]
    assert tool.params_json_schema["properties"] == {
        "invoice": {"title": "Invoice", "type": "string"},
        "amount": {"title": "Amount", "type": "integer"},
    }
    assert tool.params_json_schema["required"] == ["invoice", "amount"]
    assert (tool.name, tool.description) == ("pay_invoice", "Pay a supplier invoice.")


def test_a_call_nobody_decided_in_time_fails_closed(aovs, run_id):
    ledger = []
    runner = OversightRunner(payer(aovs, ledger), aovs)
    assert asyncio.run(runner.run("Pay INV-7", run_id)) is None
    assert expire_if_due(Operation.objects.get(call_id="pay-1"), timezone.now() + timedelta(days=9))
    assert asyncio.run(runner.poll(wait=5)) == 1
    done = runner.results[run_id]
    assert tool_output(done) == "Nobody decided on this call in time: it was not made."
    assert ledger == []


def test_a_cancelled_run_is_not_resumed(aovs, run_id, admin_user):
    ledger = []
    runner = OversightRunner(payer(aovs, ledger), aovs)
    assert asyncio.run(runner.run("Pay INV-7", run_id)) is None
    cancel_run(run=Run.objects.get(pk=run_id), actor=Actor.of_user(admin_user), reason="stop")
    assert asyncio.run(runner.poll(wait=5)) == 0
    assert (runner.results, runner.failed, ledger) == ({}, {}, [])
    assert runner.cancelled == {run_id}


def test_the_runner_mirrors_the_turns_into_the_run_s_messages(aovs, run_id, reviewer):
    runner = OversightRunner(payer(aovs, []), aovs)
    asyncio.run(runner.run("Pay INV-7", run_id))
    decide_on(Operation.objects.get(call_id="pay-1"), reviewer)
    asyncio.run(runner.resume(run_id))
    said = [
        (m.kind, m.payload["text"])
        for m in Run.objects.get(pk=run_id).messages.order_by("seq")
        if not (m.payload.get("data") or {})
    ]
    assert said == [
        ("user", "Pay INV-7"),
        ("tool", 'pay_invoice: {"paid": "INV-7", "amount": 45}'),
        ("agent", "Reported."),
    ]


def test_a_call_a_policy_approved_runs_at_once_beside_one_that_waits(
    aovs, run_id, reviewer, project
):
    """The SDK runs a turn's calls that need no approval before it returns the
    interruption: the auto-approved payment runs then, once, and not again on resume."""
    ApprovalPolicy.objects.create(
        project=project,
        action="invoices.pay",
        approvals_required=ApprovalPolicy.Approvals.AUTO,
        when_argument="amount",
        when_operator="lt",
        when_value=50,
    )
    ledger = []
    agent = payer(aovs, ledger)
    agent.model = ScriptedModel(
        [
            [
                function_call("pay_invoice", {"invoice": "INV-7", "amount": 45}, call_id="small"),
                function_call("pay_invoice", {"invoice": "INV-42", "amount": 120}, call_id="big"),
            ],
            [assistant_message("Reported.")],
        ]
    )
    runner = OversightRunner(agent, aovs)
    assert asyncio.run(runner.run("Pay both", run_id)) is None
    assert [entry for _, entry in ledger] == [("INV-7", 45)]  # ran before the interruption
    decide_on(Operation.objects.get(call_id="big"), reviewer)
    done = asyncio.run(runner.resume(run_id))
    assert done.final_output == "Reported."
    assert [entry for _, entry in ledger] == [("INV-7", 45), ("INV-42", 120)]
    assert set(Operation.objects.values_list("call_id", "status")) == {
        ("small", "committed"),
        ("big", "committed"),
    }


def test_a_call_whose_arguments_do_not_parse_is_refused_not_left_waiting(aovs, run_id):
    """The SDK pauses such a call without asking its approval hook: nothing is proposed,
    so the runner rejects it at once, and the model reads why."""
    agent = payer(aovs, [])
    agent.model = ScriptedModel(
        [
            [function_call("pay_invoice", '{"invoice": "INV-7", "amount": 4', call_id="cut")],
            [assistant_message("I could not pay.")],
        ]
    )
    done = asyncio.run(OversightRunner(agent, aovs).run("Pay INV-7", run_id))
    assert tool_output(done) == "This call was not made: its arguments are not a JSON object."
    assert done.final_output == "I could not pay."
    assert not Operation.objects.exists()


def test_a_turn_the_server_would_refuse_is_mirrored_cleaned_and_cut(aovs, run_id):
    agent = payer(aovs, [])
    agent.model = ScriptedModel([[assistant_message("bye\x00" + "🙂" * 20_000)]])
    done = asyncio.run(OversightRunner(agent, aovs).run("Say bye", run_id))
    assert done.final_output.startswith("bye\x00")
    said = Run.objects.get(pk=run_id).messages.filter(kind="agent").first().payload["text"]
    assert said.startswith("bye\ufffd🙂") and said.endswith("…")
    assert len(said.encode()) <= 16_000


def test_a_tool_may_have_a_parameter_named_call_id(aovs, run_id, project):
    ApprovalPolicy.objects.create(
        project=project, action="notes.tag", approvals_required=ApprovalPolicy.Approvals.AUTO
    )

    done_keys = set()

    async def tagged(arguments: dict, key: str) -> Observed:
        return Observed("applied" if key in done_keys else "absent")

    @supervised_function_tool(aovs, action="notes.tag", rollback_kind="none", verify=tagged)
    async def tag(call_id: str, *, idempotency_key: str) -> str:
        """Tag a call."""
        done_keys.add(idempotency_key)
        return f"tagged {call_id}"

    model = ScriptedModel(
        [[function_call("tag", {"call_id": "c-9"}, call_id="t-1")], [assistant_message("ok")]]
    )
    done = asyncio.run(
        OversightRunner(Agent(name="t", model=model, tools=[tag]), aovs).run("Tag", run_id)
    )
    assert tool_output(done) == "tagged c-9"


def test_the_model_asks_a_person_without_holding_the_process(aovs, run_id, reviewer):
    """``question_tool``: the question waits in the reviewers' queue while the run is
    paused (a plain tool calling ``ask`` would block the process), and the model reads
    the person's choice; a second question in the same run waits and is read too."""
    ask = question_tool(aovs)
    which = {"question": "Which invoice do we pay?", "choices": ["INV-7", "INV-8"]}
    why = {"question": "Why INV-8?", "choices": None}
    model = ScriptedModel(
        [
            [function_call("ask_a_person", which, call_id="ask-1")],
            [function_call("ask_a_person", why, call_id="ask-2")],
            [assistant_message("Paying INV-8.")],
        ]
    )
    runner = OversightRunner(Agent(name="payer", model=model, tools=[ask]), aovs)
    assert asyncio.run(runner.run("Pay the right invoice", run_id)) is None
    asked = HumanRequest.objects.get(run_id=run_id)
    assert (asked.kind, asked.prompt, asked.choices) == (
        "choice",
        "Which invoice do we pay?",
        ["INV-7", "INV-8"],
    )
    assert asyncio.run(runner.resume(run_id)) is None  # not answered yet
    answer_request(asked, reviewer, "choose", data="INV-8")
    assert asyncio.run(runner.resume(run_id)) is None  # the second question waits
    second = HumanRequest.objects.get(run_id=run_id, status="open")
    assert (second.kind, second.prompt) == ("question", "Why INV-8?")
    answer_request(second, reviewer, "answer", data="INV-7 has a credit note")
    done = asyncio.run(runner.resume(run_id))
    outputs = [i.output for i in done.new_items if i.type == "tool_call_output_item"]
    assert outputs[-1] == "INV-7 has a credit note"
    assert done.final_output == "Paying INV-8."


def answer_request(request: HumanRequest, reviewer, kind: str, **given) -> None:
    human_requests.answer(
        request=request, reviewer=reviewer, kind=kind, version=request.version, **given
    )
