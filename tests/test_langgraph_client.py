"""LangGraph with the client's extra, against a live server: the example agent's graph
run in this process, reviewers deciding and answering through the services (as the
pages do), the thread paused by interrupts and resumed by a ``Resumer`` following the
feed."""

import subprocess
import sys
from typing import TypedDict

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.types import interrupt

from oversight_client import Oversight
from oversight_client.langgraph import FileCursor, Resumer, supervised_tool
from oversight_client.langgraph.resumer import config
from runs.actors import Actor
from runs.models import Decision, HumanRequest, Operation
from runs.services import requests as human_requests
from runs.services.runs import cancel_run
from tests.langgraph_helpers import (
    ROOT,
    choose,
    decide,
    example,
    messages,
    paused_on_payment,
    proposed,
    state,
)

pytest_plugins = ["tests.client_helpers"]


@pytest.fixture
def agent(ovs, tmp_path) -> Resumer:
    """The example's graph, checkpointed under tmp_path, with a resumer of its own."""
    return Resumer(example().build(ovs, tmp_path), ovs)


def ledger(tmp_path) -> list[str]:
    path = tmp_path / "ledger.txt"
    return path.read_text().splitlines() if path.exists() else []


def test_the_model_sees_only_the_functions_own_arguments():
    ovs = Oversight("http://127.0.0.1:9", "ovs_unused")

    @supervised_tool(ovs, action="invoices.pay", rollback_kind="none", verify=bool)
    def pay_invoice(invoice: str, amount: int, *, idempotency_key: str) -> dict:
        """Pay a supplier invoice."""

    function = convert_to_openai_tool(pay_invoice)["function"]
    assert (function["name"], function["description"]) == ("pay_invoice", "Pay a supplier invoice.")
    assert function["parameters"]["properties"] == {
        "invoice": {"type": "string"},
        "amount": {"type": "integer"},
    }
    assert function["parameters"]["required"] == ["invoice", "amount"]


def test_the_core_client_imports_without_langgraph():
    blocked = "import sys; sys.modules.update(langgraph=None, langchain_core=None, pydantic=None)"
    code = f"{blocked}; import oversight_client, oversight_client.sync, oversight_client.aio"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    code = f"{blocked}; import oversight_client.langgraph"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert 'pip install "oversight-client[langgraph]"' in done.stderr


def test_a_question_then_an_approved_payment(agent, reviewer, tmp_path):
    agent.start({"messages": []}, "t-approve")
    request = HumanRequest.objects.get(run__external_id="t-approve")
    assert (request.prompt, request.choices, request.status) == (
        "Which invoice should I pay?",
        ["INV-42", "INV-7"],
        "open",
    )
    assert request.external_id == state(agent, "t-approve").interrupts[0].id
    assert agent.poll(wait=1) == 0  # nothing decided: the thread stays paused
    choose("t-approve", reviewer, "INV-7")
    assert agent.poll(wait=5) == 1
    operation = proposed("pay-INV-7-1")
    assert (operation.run.external_id, operation.action) == ("t-approve", "invoices.pay")
    assert operation.arguments == {"invoice": "INV-7", "amount": 45}
    assert state(agent, "t-approve").next == ("tools",)
    assert ledger(tmp_path) == []
    decide(agent, "pay-INV-7-1", reviewer, Decision.Kind.APPROVE)
    *_, answer, last = messages(agent, "t-approve")
    assert isinstance(answer, ToolMessage) and answer.status == "success"
    assert last.content == 'Done: {"paid": "INV-7", "amount": 45}'
    assert [line.split(" [")[0] for line in ledger(tmp_path)] == ["INV-7 45"]
    assert Operation.objects.get(call_id="pay-INV-7-1").status == "committed"
    assert state(agent, "t-approve").next == ()


def test_a_question_not_asked_before_a_crash_is_asked_on_resume(agent, reviewer):
    # The graph paused on its question, and the process died before asking it.
    agent.graph.invoke({"messages": []}, {"configurable": {"thread_id": "t-crashed"}})
    assert not HumanRequest.objects.filter(run__external_id="t-crashed").exists()
    assert agent.resume("t-crashed") is False  # nothing decided yet: asked instead
    asked = HumanRequest.objects.get(run__external_id="t-crashed", status="open")
    assert asked.external_id == state(agent, "t-crashed").interrupts[0].id
    assert agent.resume("t-crashed") is False  # asked once
    assert HumanRequest.objects.filter(run__external_id="t-crashed").count() == 1


def test_a_rejection_reaches_the_model_with_its_reason(agent, reviewer, tmp_path):
    paused_on_payment(agent, "t-reject", reviewer)
    decide(agent, "pay-INV-42-1", reviewer, Decision.Kind.REJECT, comment="Over budget")
    rejected = [m for m in messages(agent, "t-reject") if isinstance(m, ToolMessage)][-1]
    assert rejected.status == "error"
    assert rejected.content == "A reviewer rejected this call: Over budget"
    assert proposed("pay-INV-42-2").arguments == {"invoice": "INV-42", "amount": 108}
    decide(agent, "pay-INV-42-2", reviewer, Decision.Kind.REJECT, comment="Still no")
    assert messages(agent, "t-reject")[-1].content == (
        "Not paid: A reviewer rejected this call: Still no"
    )
    assert ledger(tmp_path) == []


def test_an_edit_reaches_the_model(agent, reviewer, tmp_path):
    paused_on_payment(agent, "t-edit", reviewer)
    edited = {"invoice": "INV-42", "amount": 100}
    decide(agent, "pay-INV-42-1", reviewer, Decision.Kind.EDIT, arguments=edited)
    answer = [m for m in messages(agent, "t-edit") if isinstance(m, ToolMessage)][-1]
    assert answer.content == (
        'A reviewer changed your arguments to {"invoice": "INV-42", "amount": 100}. '
        'Result: {"paid": "INV-42", "amount": 100}'
    )
    assert [line.split(" [")[0] for line in ledger(tmp_path)] == ["INV-42 100"]


def test_a_cancelled_runs_thread_is_never_resumed(agent, reviewer, admin_user, tmp_path):
    run = paused_on_payment(agent, "t-cancel", reviewer)
    cancel_run(run=run, actor=Actor.of_user(admin_user), reason="wrong supplier")
    assert Operation.objects.get(call_id="pay-INV-42-1").status == "cancelled"
    assert agent.poll(wait=2) == 0
    assert agent.cancelled == {"t-cancel"}
    assert state(agent, "t-cancel").next == ("tools",)
    assert agent.resume("t-cancel") is False
    assert ledger(tmp_path) == []
    # Restarted past the cancel in the feed: recover() learns it from the run.
    restarted = Resumer(agent.graph, agent.ovs)
    assert restarted.recover("t-cancel") is False
    assert restarted.cancelled == {"t-cancel"}


def test_interrupt_values_become_requests_and_answers_resume_values():
    from langgraph.types import Interrupt

    from oversight_client.langgraph import ask_for, resume_value

    question = Interrupt(value="Which supplier?", id="i-1")
    assert ask_for(question) == {"prompt": "Which supplier?", "kind": "question"}
    schema = {"type": "object", "properties": {"amount": {"type": "number"}}}
    asked = ask_for(Interrupt(value="How much?", id="i-2", response_schema=schema))
    assert (asked["kind"], asked["answer_schema"]) == ("data", schema)
    sign_off = {"sign_off": "Send the June plan?", "context": "**3 steps**"}
    assert ask_for(Interrupt(value=sign_off, id="i-3")) == {
        "prompt": "Send the June plan?",
        "kind": "sign_off",
        "context": "**3 steps**",
    }
    chosen = ask_for(Interrupt(value={"question": "Which?", "choices": ["a", "b"]}, id="i-5"))
    assert (chosen["kind"], chosen["choices"]) == ("choice", ["a", "b"])
    rejected = {"status": "rejected", "answer": {"kind": "reject", "comment": "Not yet"}}
    assert resume_value(sign_off, rejected) is False
    assert resume_value("Which supplier?", rejected) is None
    answered = {"status": "answered", "answer": {"kind": "answer", "data": "Acme"}}
    assert resume_value("Which supplier?", answered) == "Acme"
    human = [
        {
            "action_request": {"action": "send_email", "args": {"to": "a@example.com"}},
            "config": {"allow_accept": True, "allow_respond": True},
            "description": "Send this email?",
        }
    ]
    asked = ask_for(Interrupt(value=human, id="i-4"))
    assert (asked["prompt"], asked["kind"], "answer_schema" in asked) == (
        "Send this email?",
        "sign_off",
        False,
    )
    unacceptable = [{**human[0], "config": {"allow_respond": True}}]
    assert ask_for(Interrupt(value=unacceptable, id="i-6"))["kind"] == "question"
    assert '"to": "a@example.com"' in asked["context"]
    approved = {"status": "answered", "answer": {"kind": "approve"}}
    assert resume_value(human, approved) == [{"type": "accept", "args": None}]
    assert resume_value(human, rejected) == [{"type": "response", "args": "Not yet"}]


def test_what_a_graph_interrupts_with_is_asked_within_the_server_s_limits(ovs, run_id):
    from langgraph.types import Interrupt

    from oversight_client.langgraph import ask_for

    plan = {"steps": [f"step {n}: move the invoices of supplier {n}" for n in range(600)]}
    many = {"question": "Which supplier?", "choices": [f"supplier {n}" for n in range(30)]}
    twice = {"question": "Which one?", "choices": ["INV-7", "INV-7", "INV-42"]}
    for n, value in enumerate((plan, many, twice, "  ")):
        asked = ask_for(Interrupt(value=value, id=f"i-{n}"))
        request = ovs.ask(run_id, external_id=f"i-{n}", **asked)  # the server takes each
        assert request["status"] == "open"
    assert ask_for(Interrupt(value=plan, id="i-0"))["prompt"] == (
        "The agent's graph asks (in full below):"
    )
    assert "(cut: " in ask_for(Interrupt(value=plan, id="i-0"))["context"]
    spelled = ask_for(Interrupt(value=many, id="i-1"))
    assert "choices" not in spelled and "- supplier 29" in spelled["context"]
    assert spelled["kind"] == "question"
    assert ask_for(Interrupt(value=twice, id="i-2"))["choices"] == ["INV-7", "INV-42"]


class Said(TypedDict):
    said: str


def test_a_thread_that_fails_to_resume_holds_up_no_other(ovs, reviewer, tmp_path):
    def listen(state: Said) -> Said:
        said = interrupt("Say something")
        if said == "boom":
            raise RuntimeError("the node broke")
        return {"said": said}

    builder = StateGraph(Said)
    builder.add_node("listen", listen)
    builder.add_edge(START, "listen")
    cursor = FileCursor(tmp_path / "cursor")
    resumer = Resumer(builder.compile(checkpointer=InMemorySaver()), ovs, cursor)
    for thread, said in (("t-broken", "boom"), ("t-fine", "hello")):
        resumer.start({"said": ""}, thread)
        request = HumanRequest.objects.get(run__external_id=thread)
        human_requests.answer(
            request=request, reviewer=reviewer, kind="answer", version=request.version, data=said
        )

    assert resumer.poll(wait=5) == 1
    assert resumer.failed == {"t-broken": "RuntimeError: the node broke"}
    assert resumer.graph.get_state(config("t-fine")).values == {"said": "hello"}
    assert resumer.graph.get_state(config("t-broken")).next == ("listen",)
    assert cursor.load() == resumer.feed.after  # past both events: a restart goes on from there
