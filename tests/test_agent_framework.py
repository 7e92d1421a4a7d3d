"""The Agent Framework adapter against a live server, with a scripted chat client and
plain executors (no key, no network): checkpoints kept in the run, a workflow's
questions answered from the queue, an agent's tool calls decided by reviewers and made
once with the approved arguments."""

import asyncio
from dataclasses import dataclass
from datetime import timedelta
from typing import Never

import pytest
from agent_framework import (
    Executor,
    WorkflowBuilder,
    WorkflowCheckpoint,
    WorkflowCheckpointException,
    WorkflowContext,
    handler,
    response_handler,
)
from django.utils import timezone

from oversight_client import AsyncOversight, Unreachable
from oversight_client.agent_framework import OversightCheckpointStorage, WorkflowDriver
from oversight_client.cursor import FileCursor
from oversight_client.in_run import current_run
from runs.actors import Actor
from runs.models import (
    ApprovalPolicy,
    CheckpointArtifact,
    Decision,
    FeedEvent,
    HumanRequest,
    Message,
    Operation,
    Run,
)
from runs.services import requests as human_requests
from runs.services.decisions import expire_if_due
from runs.services.runs import append_message, cancel_run
from tests.agent_framework_helpers import (
    PAY,
    asking,
    dispatching,
    paying_tool,
    paying_workflow,
    payments,
    plain_paying_workflow,
    refunds,
    said,
    shipping,
)
from tests.client_helpers import client_for
from tests.helpers import decide_on

pytest_plugins = ["tests.client_helpers"]
REFUND = ["tests.agent_framework_helpers:Refund"]
CARRIER = ["tests.agent_framework_helpers:Carrier"]


@pytest.fixture
def run_id(aovs) -> int:
    async def start() -> int:
        session = await aovs.open_session(title="Payments")
        return (await aovs.start_run(session["id"], goal="Pay the supplier"))["id"]

    return asyncio.run(start())


@pytest.fixture
def ledger(tmp_path):
    return tmp_path / "ledger"


@pytest.fixture
def driver(aovs, ledger) -> WorkflowDriver:
    tool = paying_tool(aovs, ledger)
    return WorkflowDriver(lambda: paying_workflow(tool), aovs, tools=[tool])


def answer(reviewer, kind: str, **given) -> HumanRequest:
    request = HumanRequest.objects.get(status="open")
    human_requests.answer(
        request=request, reviewer=reviewer, kind=kind, version=request.version, **given
    )
    return request


# --- checkpoints ---------------------------------------------------------------------


def test_checkpoints_are_artifacts_of_the_run_named_by_its_messages(aovs, run_id):
    storage = OversightCheckpointStorage(aovs, run_id)
    first = WorkflowCheckpoint(workflow_name="w", graph_signature_hash="h", state={"n": 1})
    second = WorkflowCheckpoint(workflow_name="w", graph_signature_hash="h", state={"n": 2})
    other = WorkflowCheckpoint(workflow_name="other", graph_signature_hash="h")

    async def go():
        for checkpoint in (first, second, other):
            assert await storage.save(checkpoint) == checkpoint.checkpoint_id
        loaded = await storage.load(first.checkpoint_id)
        assert (loaded.state, loaded.workflow_name) == ({"n": 1}, "w")
        ids = [first.checkpoint_id, second.checkpoint_id]
        assert await storage.list_checkpoint_ids(workflow_name="w") == ids
        assert [c.state for c in await storage.list_checkpoints(workflow_name="w")] == [
            {"n": 1},
            {"n": 2},
        ]
        assert (await storage.get_latest(workflow_name="w")).state == {"n": 2}
        assert await storage.delete(second.checkpoint_id) is True
        assert await storage.delete(second.checkpoint_id) is False
        assert (await storage.get_latest(workflow_name="w")).state == {"n": 1}
        assert await storage.get_latest(workflow_name="none") is None
        with pytest.raises(WorkflowCheckpointException):
            await storage.load(second.checkpoint_id)

    asyncio.run(go())
    assert CheckpointArtifact.objects.filter(checkpoint__run_id=run_id).count() == 3


def test_a_checkpoint_is_never_decoded_from_what_a_caller_or_a_person_names(aovs, run_id, owner):
    """Only a sha256 recorded by the agent's own message in its own run is fetched and
    decoded: a person's reply naming another blob, or an unknown id, finds nothing."""
    storage = OversightCheckpointStorage(aovs, run_id)
    saved = WorkflowCheckpoint(workflow_name="w", graph_signature_hash="h")
    asyncio.run(storage.save(saved))
    named = Message.objects.get(run_id=run_id, payload__data__has_key="agent_framework_checkpoint")
    forged = dict(named.payload["data"]["agent_framework_checkpoint"], id="forged")
    append_message(
        run=Run.objects.get(pk=run_id),
        kind="user",
        payload={"text": "here", "data": {"agent_framework_checkpoint": forged}},
        actor=Actor.of_user(owner),
    )

    async def go():
        with pytest.raises(WorkflowCheckpointException):
            await storage.load("forged")
        with pytest.raises(WorkflowCheckpointException):
            await storage.load(named.payload["data"]["agent_framework_checkpoint"]["sha256"])
        assert await storage.list_checkpoint_ids(workflow_name="w") == [saved.checkpoint_id]

    asyncio.run(go())


# --- an agent's supervised tool --------------------------------------------------------


def test_an_approved_call_runs_once_and_the_model_reads_its_output(
    driver, run_id, reviewer, ledger
):
    assert asyncio.run(driver.start("Pay INV-7", run_id)) is None  # waits for reviewers
    operation = Operation.objects.get(call_id="pay-1")
    assert (operation.status, operation.arguments) == (
        "proposed",
        {"invoice": "INV-7", "amount": 45},
    )
    assert asyncio.run(driver.poll()) == 0  # nothing decided yet
    assert payments(ledger) == []

    decide_on(operation, reviewer)
    assert asyncio.run(driver.poll(wait=5)) == 1
    assert said(driver.outputs[run_id]) == 'Read: {"paid": "INV-7", "amount": 45}'
    assert payments(ledger) == ["INV-7 45"]
    assert Operation.objects.get(call_id="pay-1").status == "committed"
    while asyncio.run(driver.poll(wait=1)):
        pass  # its committed events resume nothing
    assert payments(ledger) == ["INV-7 45"]


def test_the_model_never_sees_the_idempotency_key(aovs, ledger):
    tool = paying_tool(aovs, ledger)
    assert tool.parameters()["properties"] == {
        "invoice": {"title": "Invoice", "type": "string"},
        "amount": {"title": "Amount", "type": "integer"},
    }
    assert (tool.name, tool.description, tool.approval_mode) == (
        "pay_invoice",
        "Pay a supplier invoice.",
        "always_require",
    )


def test_a_rejection_s_reason_reaches_the_model(driver, run_id, reviewer, ledger):
    asyncio.run(driver.start("Pay INV-7", run_id))
    decide_on(
        Operation.objects.get(call_id="pay-1"),
        reviewer,
        Decision.Kind.REJECT,
        comment="INV-7 has a credit note",
    )
    asyncio.run(driver.poll(wait=5))
    assert (
        said(driver.outputs[run_id])
        == "Read: A reviewer rejected this call: INV-7 has a credit note"
    )
    assert payments(ledger) == []


def test_an_edit_is_made_and_named_to_the_model(driver, run_id, reviewer, ledger):
    asyncio.run(driver.start("Pay INV-7", run_id))
    decide_on(
        Operation.objects.get(call_id="pay-1"),
        reviewer,
        Decision.Kind.EDIT,
        arguments={"invoice": "INV-7", "amount": 40},
    )
    asyncio.run(driver.poll(wait=5))
    assert said(driver.outputs[run_id]) == (
        'Read: A reviewer changed your arguments to {"invoice": "INV-7", "amount": 40}. '
        'Result: {"paid": "INV-7", "amount": 40}'
    )
    assert payments(ledger) == ["INV-7 40"]


def test_a_call_nobody_decided_in_time_fails_closed(driver, run_id, ledger):
    asyncio.run(driver.start("Pay INV-7", run_id))
    assert expire_if_due(Operation.objects.get(call_id="pay-1"), timezone.now() + timedelta(days=9))
    assert asyncio.run(driver.poll(wait=5)) == 1
    assert (
        said(driver.outputs[run_id])
        == "Read: Nobody decided on this call in time: it was not made."
    )
    assert payments(ledger) == []


def test_a_cancelled_run_s_workflow_never_runs_again(driver, run_id, admin_user, ledger):
    asyncio.run(driver.start("Pay INV-7", run_id))
    cancel_run(run=Run.objects.get(pk=run_id), actor=Actor.of_user(admin_user), reason="stop")
    assert asyncio.run(driver.poll(wait=5)) == 0
    assert driver.cancelled == {run_id}
    assert asyncio.run(driver.resume(run_id)) is None
    assert (driver.outputs, driver.failed, payments(ledger)) == ({}, {}, [])
    assert Operation.objects.get(call_id="pay-1").status == "cancelled"


def test_a_call_oversight_refuses_is_answered_at_once(aovs, run_id, ledger):
    """Arguments the server refuses (a string over its limits) are never proposed: the
    model reads why, and the workflow goes on."""
    tool = paying_tool(aovs, ledger)
    huge = ("pay_invoice", {"invoice": "x" * 300_000, "amount": 1}, "pay-huge")
    driver = WorkflowDriver(lambda: paying_workflow(tool, [huge]), aovs, tools=[tool])
    outputs = asyncio.run(driver.start("Pay", run_id))
    assert said(outputs).startswith("Read: This call was not made: ")
    assert payments(ledger) == []
    assert not Operation.objects.filter(call_id="pay-huge").exists()


def test_one_failing_resume_holds_up_no_other(aovs, reviewer, ledger, tmp_path):
    tool = paying_tool(aovs, ledger)
    resuming = []

    async def two_runs():
        session = await aovs.open_session(title="Payments")
        return [(await aovs.start_run(session["id"], goal=g))["id"] for g in ("a", "b")]

    first, second = asyncio.run(two_runs())

    def build():  # the first run's resume finds the workflow's definition broken
        try:
            run = current_run()
        except RuntimeError:  # built to read the types it declares
            run = None
        if run == first and resuming:
            raise RuntimeError("the workflow's definition is broken")
        later = ("pay_invoice", {"invoice": "INV-8", "amount": 5}, "pay-2")
        return paying_workflow(tool, [later] if run == second else [PAY])

    driver = WorkflowDriver(build, aovs, tools=[tool], cursor=FileCursor(tmp_path / "cursor"))
    asyncio.run(driver.start("Pay", first))
    asyncio.run(driver.start("Pay", second))
    resuming.append(True)
    decide_on(Operation.objects.get(call_id="pay-1"), reviewer)
    decide_on(Operation.objects.get(call_id="pay-2"), reviewer)
    while asyncio.run(driver.poll(wait=2)):
        pass
    assert "the workflow's definition is broken" in driver.failed[first]
    assert said(driver.outputs[second]) == 'Read: {"paid": "INV-8", "amount": 5}'
    assert payments(ledger) == ["INV-8 5"]
    assert FileCursor(tmp_path / "cursor").load() == driver.feed.after  # moved past both


# --- a workflow's own questions -------------------------------------------------------


def test_a_question_is_asked_in_the_queue_and_its_answer_typed(aovs, run_id, reviewer):
    driver = WorkflowDriver(refunds, aovs, allowed_checkpoint_types=REFUND)
    assert asyncio.run(driver.start("A-1", run_id)) is None
    request = HumanRequest.objects.get(run_id=run_id)
    assert request.prompt == "How much do we refund on A-1?"
    assert request.kind == "data"
    assert request.answer_schema["required"] == ["amount", "reason"]
    answer(reviewer, "answer", data={"amount": 5, "reason": "late"})
    assert asyncio.run(driver.poll(wait=5)) == 1
    assert driver.outputs[run_id] == ["Refund 5: late"]


def test_a_sign_off_resumes_with_true_and_a_rejection_with_false(aovs, reviewer):
    async def runs():
        session = await aovs.open_session(title="Shipping")
        return [(await aovs.start_run(session["id"], goal=g))["id"] for g in ("a", "b")]

    signed, rejected = asyncio.run(runs())
    driver = WorkflowDriver(shipping, aovs)
    asyncio.run(driver.start("A-1", signed))
    answer(reviewer, "approve")
    asyncio.run(driver.poll(wait=5))
    asyncio.run(driver.start("A-2", rejected))
    answer(reviewer, "reject", comment="not paid")
    asyncio.run(driver.poll(wait=5))
    assert (driver.outputs[signed], driver.outputs[rejected]) == (["shipped"], ["held"])


def test_a_rejected_question_fails_the_run_visibly(aovs, run_id, reviewer):
    """A Refund cannot be made of a rejection: the run fails, saying why, instead of the
    workflow going on with something it did not ask for."""
    driver = WorkflowDriver(refunds, aovs, allowed_checkpoint_types=REFUND)
    asyncio.run(driver.start("A-1", run_id))
    answer(reviewer, "reject", comment="no refund on sale items")
    assert asyncio.run(driver.poll(wait=5)) == 0
    why = "A reviewer rejected the workflow's request: no refund on sale items"
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.outcome) == ("failed", why)
    assert driver.failed[run_id] == why
    assert run_id not in driver.outputs


def test_the_workflow_resumes_after_a_restart_from_its_checkpoint_in_the_run(
    aovs, run_id, reviewer, live_server, client_token
):
    """A second driver (a restarted process, a new client) finds everything in the run."""
    asyncio.run(WorkflowDriver(refunds, aovs, allowed_checkpoint_types=REFUND).start("A-1", run_id))
    answer(reviewer, "answer", data={"amount": 5, "reason": "late"})
    again = client_for(live_server, client_token, AsyncOversight)
    driver = WorkflowDriver(refunds, again, allowed_checkpoint_types=REFUND)
    assert asyncio.run(driver.resume(run_id)) == ["Refund 5: late"]


def test_a_hostile_question_is_fitted_to_the_server_s_limits(aovs, run_id, reviewer):
    """A question longer than the server takes is asked all the same, in full below a
    short prompt; the answer in words resumes the workflow."""
    driver = WorkflowDriver(lambda: asking("?" * 10_000), aovs)
    asyncio.run(driver.start("A-1", run_id))
    request = HumanRequest.objects.get(run_id=run_id)
    assert request.prompt == "The agent's workflow asks (in full below):"
    assert request.context.startswith("?" * 10_000)
    assert (request.kind, request.answer_schema) == ("question", None)  # a str: in words
    answer(reviewer, "answer", data="ship it")
    asyncio.run(driver.poll(wait=5))
    assert driver.outputs[run_id] == ["ship it"]


def test_a_checkpoint_the_server_refuses_fails_the_run_visibly(aovs, run_id):
    """The framework runs on when a checkpoint cannot be saved; the driver does not: a
    pause it cannot resume from ends the run, saying why."""
    driver = WorkflowDriver(lambda: asking("?" * 7_000_000), aovs)
    assert asyncio.run(driver.start("A-1", run_id)) is None
    run = Run.objects.get(pk=run_id)
    assert run.status == "failed"
    assert run.outcome.startswith("The workflow's checkpoint could not be stored (InvalidRequest: ")
    assert not HumanRequest.objects.filter(run_id=run_id).exists()


def test_a_plain_tool_s_approval_is_a_sign_off_in_the_queue(aovs, run_id, reviewer, ledger):
    """A tool the framework runs itself (``approval_mode="always_require"``, not
    supervised) waits for a reviewer's sign-off; a rejection keeps it from running."""
    driver = WorkflowDriver(lambda: plain_paying_workflow(ledger), aovs)
    assert asyncio.run(driver.start("Pay", run_id)) is None
    request = HumanRequest.objects.get(run_id=run_id)
    assert (request.prompt, request.kind) == ("Allow the agent's call to pay_invoice?", "sign_off")
    assert '"invoice": "INV-7"' in request.context
    assert payments(ledger) == []
    answer(reviewer, "approve")
    asyncio.run(driver.poll(wait=5))
    assert said(driver.outputs[run_id]) == "Read: paid INV-7"
    assert payments(ledger) == ["INV-7 45"]


def test_an_enum_is_offered_as_choices_and_a_dict_s_question_is_the_prompt(aovs, run_id, reviewer):
    """``Carrier``, the answer's type, is allowed in the checkpoints without being named:
    the workflow declares it (before, unnamed, it ended the workflow with no outputs)."""
    driver = WorkflowDriver(dispatching, aovs)
    asyncio.run(driver.start("A-1", run_id))
    request = HumanRequest.objects.get(run_id=run_id)
    assert (request.prompt, request.kind, request.choices) == (
        "Who ships A-1?",
        "choice",
        ["post", "courier"],
    )
    assert '"weight": "2 kg"' in request.context
    answer(reviewer, "choose", data="courier")
    asyncio.run(driver.poll(wait=5))
    assert driver.outputs[run_id] == ["by courier"]


def test_an_answer_the_declared_type_refuses_fails_the_run_visibly(aovs, run_id, reviewer):
    """Valid against the JSON Schema, refused by the type itself: the driver does not
    crash, and the run ends saying which answer could not be used and why."""
    driver = WorkflowDriver(refunds, aovs, allowed_checkpoint_types=REFUND)
    asyncio.run(driver.start("A-1", run_id))
    answer(reviewer, "answer", data={"amount": -5, "reason": "late"})
    assert asyncio.run(driver.poll(wait=5)) == 0
    run = Run.objects.get(pk=run_id)
    assert run.status == "failed"
    assert run.outcome.startswith('The answer {"amount": -5, "reason": "late"} is not a Refund: ')
    assert "a refund is a positive amount" in run.outcome
    assert run_id not in driver.outputs


def test_a_call_a_policy_approved_runs_at_once(aovs, run_id, project, ledger):
    """Approved by a policy as it is proposed: the workflow goes on without waiting for
    the feed, and the payment is made once."""
    ApprovalPolicy.objects.create(
        project=project,
        action="invoices.pay",
        approvals_required=ApprovalPolicy.Approvals.AUTO,
        when_argument="amount",
        when_operator="lt",
        when_value=50,
    )
    tool = paying_tool(aovs, ledger)
    driver = WorkflowDriver(lambda: paying_workflow(tool), aovs, tools=[tool])
    outputs = asyncio.run(driver.start("Pay INV-7", run_id))
    assert said(outputs) == 'Read: {"paid": "INV-7", "amount": 45}'
    assert payments(ledger) == ["INV-7 45"]
    while asyncio.run(driver.poll(wait=1)):
        pass
    assert payments(ledger) == ["INV-7 45"]


def test_a_pause_nobody_was_asked_about_is_asked_on_resume(aovs, run_id, reviewer):
    """The process died between the workflow's pause and its question: resuming the run
    after the restart asks it, once."""

    async def paused_unasked():
        storage = OversightCheckpointStorage(aovs, run_id, allowed_checkpoint_types=REFUND)
        await refunds().run("A-1", checkpoint_storage=storage)

    asyncio.run(paused_unasked())
    assert not HumanRequest.objects.filter(run_id=run_id).exists()
    driver = WorkflowDriver(refunds, aovs, allowed_checkpoint_types=REFUND)
    assert asyncio.run(driver.resume(run_id)) is None
    assert asyncio.run(driver.resume(run_id)) is None
    assert HumanRequest.objects.get(run_id=run_id).prompt == "How much do we refund on A-1?"
    answer(reviewer, "answer", data={"amount": 5, "reason": "late"})
    assert asyncio.run(driver.resume(run_id)) == ["Refund 5: late"]


def test_a_plain_tool_s_sign_off_is_the_run_s_own_whatever_its_call_id(
    aovs, run_id, reviewer, ledger, tmp_path
):
    """The model names its calls (here both runs' call is pay-1): a sign-off given in one
    run never lets the same-named call of another run go."""
    other_ledger = tmp_path / "other-ledger"
    first = WorkflowDriver(lambda: plain_paying_workflow(ledger), aovs)
    second = WorkflowDriver(lambda: plain_paying_workflow(other_ledger), aovs)

    async def start_other() -> int:
        session = await aovs.open_session(title="Other payments")
        other = (await aovs.start_run(session["id"], goal="Pay another supplier"))["id"]
        await second.start("Pay", other)
        return other

    assert asyncio.run(first.start("Pay", run_id)) is None
    other = asyncio.run(start_other())
    assert HumanRequest.objects.filter(status="open").count() == 2
    signed = HumanRequest.objects.get(run_id=run_id)
    human_requests.answer(request=signed, reviewer=reviewer, kind="approve", version=signed.version)
    asyncio.run(first.poll(wait=5))
    assert asyncio.run(second.resume(other)) is None
    assert payments(ledger) == ["INV-7 45"]
    assert payments(other_ledger) == []
    assert HumanRequest.objects.get(run_id=other).status == "open"


def test_oversight_out_of_reach_inside_a_call_stops_the_run_and_hands_the_event_back(
    aovs, run_id, reviewer, ledger, client_token
):
    """The framework tells the model "Function failed" for any error of a tool and goes
    on: an outage inside a supervised call would end the workflow with its operation
    never reported. It stops the run instead, and the event is handled again."""
    away = AsyncOversight("http://127.0.0.1:9", client_token, retries=0)  # nothing there
    tool = paying_tool(away, ledger)
    driver = WorkflowDriver(lambda: paying_workflow(tool), aovs, tools=[tool])
    assert asyncio.run(driver.start("Pay INV-7", run_id)) is None
    decide_on(Operation.objects.get(call_id="pay-1"), reviewer)
    with pytest.raises(Unreachable):
        asyncio.run(driver.poll(wait=5))
    approval = FeedEvent.objects.get(checkpoint__to_status="approved")
    assert driver.feed.after < approval.seq  # handed back, to be handled again
    assert payments(ledger) == []
    assert (run_id not in driver.outputs, driver.failed) == (True, {})
    assert Operation.objects.get(call_id="pay-1").status == "approved"


def test_a_run_resumed_twice_at_once_runs_its_workflow_once(driver, run_id, reviewer, ledger):
    """resume() after a restart while the feed also resumes it: one at a time, so the
    second finds nothing left to do (two would restore the same checkpoint)."""
    assert asyncio.run(driver.start("Pay INV-7", run_id)) is None
    decide_on(Operation.objects.get(call_id="pay-1"), reviewer)

    async def twice():
        return await asyncio.gather(driver.resume(run_id), driver.resume(run_id))

    first, second = asyncio.run(twice())
    assert said(first) == said(second) == 'Read: {"paid": "INV-7", "amount": 45}'
    assert payments(ledger) == ["INV-7 45"]
    assert Operation.objects.get(call_id="pay-1").status == "committed"


def test_reviewers_read_the_conversation_beside_the_checkpoints(driver, run_id, reviewer):
    """What was asked, what the tool answered and what the agent said, once each, as the
    OpenAI runner mirrors its own (before, a workflow's run showed only "The workflow …
    saved a checkpoint.")."""
    assert asyncio.run(driver.start("Pay INV-7", run_id)) is None
    decide_on(Operation.objects.get(call_id="pay-1"), reviewer)
    assert asyncio.run(driver.poll()) == 1
    said = [
        (m.kind, m.payload["text"])
        for m in Message.objects.filter(run_id=run_id).exclude(kind="system").order_by("seq")
        if "saved a checkpoint" not in m.payload["text"]
    ]
    paid = '{"paid": "INV-7", "amount": 45}'
    assert said == [
        ("user", "Pay INV-7"),
        ("tool", f"pay_invoice: {paid}"),
        ("agent", f"Read: {paid}"),
    ]


@dataclass
class Parcel:
    """A request's payload of a type no handler declares."""

    order: str


class Weigher(Executor):
    @handler
    async def start(self, order: str, ctx: WorkflowContext) -> None:
        await ctx.request_info(Parcel(order), bool)

    @response_handler
    async def weighed(self, asked: object, ok: bool, ctx: WorkflowContext[Never, str]) -> None:
        await ctx.yield_output("weighed")


def test_a_checkpoint_that_cannot_be_stored_fails_the_run_saying_why(aovs, run_id):
    """A value of a type neither declared nor allowed cannot go in a checkpoint: the
    framework would log it and end the workflow with no outputs; the run fails, and
    says why."""
    weighing = lambda: WorkflowBuilder(start_executor=Weigher(id="weigher"), name="weigh").build()  # noqa: E731
    driver = WorkflowDriver(weighing, aovs)
    assert asyncio.run(driver.start("A-1", run_id)) is None
    run = Run.objects.get(pk=run_id)
    assert run.status == "failed"
    assert run.outcome.startswith("The workflow's checkpoint could not be stored (")
    assert "Parcel" in run.outcome
    assert driver.failed[run_id] == run.outcome
