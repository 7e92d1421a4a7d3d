"""A takeover of an operation the agent executes, when the executor it takes over from is
alive: only slow, or paused past its lease. It may still fire the effect (or run the
undo), so a takeover that finds the effect absent does it again only where the tool
declares that the target deduplicates on the idempotency key; otherwise the effect is
uncertain and a person decides. The server enforces it (an intent after another epoch's
is refused, 409 earlier_attempt), and the client keeps its lease alive while the
function runs (heartbeat), so that a slow function is not taken over at all.

The paused executor is a real process stopped with SIGSTOP past its lease
(``tests/agent_takeover_child.py``); the second caller is a client in this process."""

import asyncio
import os
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from oversight_client import AsyncOversight, Oversight, StaleState, VerificationFailed, tools
from oversight_client.agent_framework import WorkflowDriver, supervised_tool
from oversight_client.tools import Execution, LeaseLost
from runs.clock import db_now
from runs.models import Alert, Operation
from runs.services.runs import cancel_run
from tests.agent_framework_helpers import paying_workflow
from tests.agent_takeover_child import PAYMENT, pay_tool
from tests.api_helpers import agent_proposal, problem
from tests.client_helpers import client_for
from tests.conftest import AGENT
from tests.helpers import decide_on, stored
from tests.processes import agent_child, said, wait_until

pytest_plugins = ["tests.api_helpers", "tests.client_helpers"]


def stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (SIGSTOP): its state in /proc is ``T``."""
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state == "T"


@pytest.fixture
def heartbeat_refused(monkeypatch) -> threading.Event:
    """Set once a heartbeat of this process's clients is refused: the lease is lost, and
    the client knows it."""
    refused = threading.Event()
    renew = tools.renew_lease

    def renew_lease(*args):
        try:
            return (yield from renew(*args))
        except LeaseLost:
            refused.set()
            raise

    monkeypatch.setattr(tools, "renew_lease", renew_lease)
    return refused


def lapse(op_id: int) -> None:
    """The operation's lease lapsed a second ago, in the database's clock."""
    Operation.objects.filter(pk=op_id).update(lease_expires_at=db_now() - timedelta(seconds=1))


# --- the server refuses a second intent -------------------------------------------------


@pytest.fixture
def push(api, run, reviewer) -> Operation:
    """An approved agent-executed operation."""
    op = Operation.objects.get(pk=api.propose(run.pk, agent_proposal()).json()["id"])
    decide_on(op, reviewer)
    return op


def step(api, op: Operation, name: str, **body):
    return api.post(f"/operations/{op.pk}/{name}", body)


def taken_over(api, op: Operation) -> int:
    """Epoch 1 claims and records its intent, then its lease lapses and epoch 2 claims."""
    assert step(api, op, "claim").status_code == 200
    assert step(api, op, "intent", epoch=1, snapshot={"head": "abc"}).status_code == 200
    lapse(op.pk)
    return step(api, op, "claim").json()["epoch"]


def test_a_takeover_may_not_fire_again_where_the_target_does_not_deduplicate(api, push):
    epoch = taken_over(api, push)
    before = stored()
    body = problem(step(api, push, "intent", epoch=epoch, snapshot={"head": "def"}), 409)
    assert body["error"] == "earlier_attempt"
    assert "could do it twice" in body["detail"]
    assert stored() == before
    push.refresh_from_db()
    assert (push.status, push.intent) == ("in_flight", {"head": "abc"})


def test_a_takeover_fires_again_where_the_target_deduplicates(api, push):
    epoch = taken_over(api, push)
    response = step(api, push, "intent", epoch=epoch, snapshot={"head": "abc"}, deduplicates=True)
    assert response.status_code == 200, response.content
    intents = push.checkpoints.filter(event="operation.intent").order_by("seq")
    assert [(c.state["attempt"]["epoch"], c.state["deduplicates"]) for c in intents] == [
        (1, False),
        (2, True),
    ]


def test_absent_after_an_earlier_intent_does_not_end_the_operation(api, push):
    epoch = taken_over(api, push)
    before = stored()
    absent = step(api, push, "report", epoch=epoch, effect="absent")
    assert problem(absent, 409)["error"] == "earlier_attempt"
    assert stored() == before
    assert step(api, push, "report", epoch=epoch, effect="uncertain").status_code == 200
    push.refresh_from_db()
    assert push.status == "verify_failed"


def unverified(api, op: Operation) -> None:
    assert step(api, op, "claim").status_code == 200
    assert step(api, op, "intent", epoch=1).status_code == 200
    assert step(api, op, "report", epoch=1, effect="uncertain").status_code == 200


def test_the_undo_is_announced_before_it_runs(api, push):
    unverified(api, push)
    response = step(api, push, "intent", epoch=1, snapshot={"undo": "revert"})
    assert response.status_code == 200, response.content
    push.refresh_from_db()
    assert (push.status, push.intent) == ("verify_failed", {})
    last = push.checkpoints.order_by("-seq").first()
    assert (last.event, last.reason) == ("operation.rollback_intent", "rolling back")
    assert (last.state["attempt"]["epoch"], last.state["rollback"]) == (1, {"undo": "revert"})


@pytest.mark.parametrize(("deduplicates", "status"), [(False, 409), (True, 200)])
def test_a_takeover_undoes_again_only_where_the_target_deduplicates(
    api, push, deduplicates, status
):
    unverified(api, push)
    assert step(api, push, "intent", epoch=1).status_code == 200  # the undo may be running
    lapse(push.pk)
    epoch = step(api, push, "claim").json()["epoch"]
    response = step(api, push, "intent", epoch=epoch, deduplicates=deduplicates)
    assert response.status_code == status, response.content
    if status == 409:
        assert response.json()["error"] == "earlier_attempt"
        assert step(api, push, "rollback", epoch=epoch, outcome="alert").status_code == 200
        assert Alert.objects.get().operation == push


def test_a_takeover_undoes_what_the_earlier_executor_never_began_to(api, push):
    unverified(api, push)
    lapse(push.pk)
    epoch = step(api, push, "claim").json()["epoch"]
    assert step(api, push, "intent", epoch=epoch).status_code == 200


def test_the_undo_is_announced_after_cancel_too(api, run, push):
    unverified(api, push)
    cancel_run(run=run, actor=AGENT, reason="stop")
    assert step(api, push, "intent", epoch=1).status_code == 200


def test_no_undo_is_announced_once_the_lease_lapsed(api, push):
    unverified(api, push)
    lapse(push.pk)
    assert problem(step(api, push, "intent", epoch=1), 409)["error"] == "stale_version"


# --- the client: a takeover that finds the effect absent --------------------------------


def paid_by_epoch_one(ovs: Oversight, run_id: int, reviewer) -> dict:
    """``pay-1`` approved, claimed by a first caller that recorded its intent and whose
    lease then lapsed: it may be alive still, and still paying."""
    op = ovs.propose(run_id, "pay-1", "supplier.pay", PAYMENT, rollback_kind="out_of_band")
    decide_on(Operation.objects.get(pk=op["id"]), reviewer)
    claim = ovs.claim(op["id"])
    ovs.record_intent(op["id"], claim["epoch"], {"function": "pay"})
    lapse(op["id"])
    return op


def test_a_takeover_that_finds_the_payment_absent_does_not_pay_again(
    ovs, run_id, reviewer, tmp_path
):
    op = paid_by_epoch_one(ovs, run_id, reviewer)
    calls = []
    pay = pay_tool(ovs, tmp_path, deduplicates=False, before=lambda: calls.append("pay"))
    with pytest.raises(VerificationFailed) as failed:
        pay(run_id, "pay-1", **PAYMENT)
    assert failed.value.outcome == "alerted"
    assert "could do it twice" in failed.value.detail
    assert calls == []
    assert not (tmp_path / "ledger").exists()
    operation = Operation.objects.get(pk=op["id"])
    assert (operation.status, operation.result["effect"]) == ("alerted", "uncertain")
    assert Alert.objects.get(operation=operation).status == "open"


def test_a_takeover_pays_again_where_the_target_deduplicates(ovs, run_id, reviewer, tmp_path):
    op = paid_by_epoch_one(ovs, run_id, reviewer)
    calls = []
    pay = pay_tool(ovs, tmp_path, deduplicates=True, before=lambda: calls.append("pay"))
    assert pay(run_id, "pay-1", **PAYMENT) == {"paid": "INV-7"}
    assert calls == ["pay"]
    assert Operation.objects.get(pk=op["id"]).status == "committed"
    assert not Alert.objects.exists()


def test_still_absent_after_paying_again_is_for_a_person(ovs, run_id, reviewer, tmp_path):
    """The earlier caller's payment may still land: "absent" is not final after it."""
    op = paid_by_epoch_one(ovs, run_id, reviewer)

    @ovs.tool(
        action="supplier.pay",
        rollback_kind="out_of_band",
        verify=lambda arguments, key: "absent",
        deduplicates=True,
    )
    def pay(invoice: str, amount: int, *, idempotency_key: str) -> None:
        """Refused by the payment service this time."""

    with pytest.raises(VerificationFailed) as failed:
        pay(run_id, "pay-1", **PAYMENT)
    assert failed.value.outcome == "alerted"
    assert "an earlier attempt's may still land" in failed.value.detail
    assert Operation.objects.get(pk=op["id"]).result["effect"] == "uncertain"


def test_a_takeover_does_not_undo_again_while_the_first_undo_may_run(ovs, run_id, reviewer):
    op = ovs.propose(run_id, "pay-1", "supplier.pay", PAYMENT, rollback_kind="compensating")
    decide_on(Operation.objects.get(pk=op["id"]), reviewer)
    first = ovs.claim(op["id"])
    ovs.record_intent(op["id"], first["epoch"], {"function": "pay"})
    ovs.report(op["id"], first["epoch"], effect="uncertain", error="no answer")
    ovs.record_intent(op["id"], first["epoch"], {"undo": "refund"})  # then paused
    lapse(op["id"])

    refunds = []
    takeover = Execution(
        ovs._core,
        ovs.operation(op["id"]),
        ovs.claim(op["id"]),
        fn=lambda **arguments: None,
        verify=lambda arguments, key: "uncertain",
        undo=lambda arguments, key: refunds.append(key),
    )
    with pytest.raises(VerificationFailed) as failed:
        ovs._drive(takeover.steps())
    assert failed.value.outcome == "alerted"
    assert "not undone again" in failed.value.detail
    assert refunds == []


# --- the client keeps its lease while the function runs ---------------------------------


def test_a_second_caller_waits_for_a_slow_first_one_and_gets_its_output(
    live_server, client_token, ovs, run_id, reviewer, tmp_path
):
    """The first caller's function takes three times its lease: its heartbeat keeps the
    lease, so the second caller of the same call_id cannot take over; it gets the
    first one's output."""
    op = ovs.propose(run_id, "pay-1", "supplier.pay", PAYMENT, rollback_kind="out_of_band")
    decide_on(Operation.objects.get(pk=op["id"]), reviewer)
    firing, calls, outputs = threading.Event(), [], []

    def slowly() -> None:
        calls.append("pay")
        firing.set()
        time.sleep(3)  # simulates a slow target

    first = pay_tool(ovs, tmp_path, deduplicates=False, before=slowly)
    caller = threading.Thread(target=lambda: outputs.append(first(run_id, "pay-1", **PAYMENT)))
    caller.start()
    assert firing.wait(timeout=30)
    second = pay_tool(client_for(live_server, client_token), tmp_path, deduplicates=False)
    assert second(run_id, "pay-1", **PAYMENT) == {"paid": "INV-7"}
    caller.join(timeout=30)
    assert outputs == [{"paid": "INV-7"}]
    assert calls == ["pay"]
    assert len((tmp_path / "ledger").read_text().splitlines()) == 1
    operation = Operation.objects.get(pk=op["id"])
    assert (operation.status, operation.fencing_epoch) == ("committed", 1)


def test_an_async_tool_keeps_its_lease_while_it_runs(
    live_server, client_token, ovs, aovs, run_id, reviewer
):
    other = client_for(live_server, client_token, AsyncOversight)
    takeovers = []

    async def landed(arguments: dict, key: str) -> str:
        return "applied"

    @aovs.tool(action="supplier.pay", rollback_kind="none", verify=landed, lease_seconds=1)
    async def pay(invoice: str, amount: int, *, idempotency_key: str) -> dict:
        op_id = (await other.find_operation(run_id=run_id, call_id="pay-1"))["id"]
        for _ in range(3):  # three times the lease
            await asyncio.sleep(1.1)  # simulates a slow target
            try:
                await other.claim(op_id)
                takeovers.append("taken over")
            except StaleState:
                takeovers.append("held")
        return {"paid": invoice}

    op = Operation.objects.get(
        pk=ovs.propose(run_id, "pay-1", "supplier.pay", PAYMENT, rollback_kind="none")["id"]
    )
    decide_on(op, reviewer)
    assert asyncio.run(pay(run_id, "pay-1", **PAYMENT)) == {"paid": "INV-7"}
    assert takeovers == ["held", "held", "held"]
    op.refresh_from_db()
    assert (op.status, op.fencing_epoch) == ("committed", 1)


def losing_its_lease(ovs: Oversight, run_id: int, reviewer) -> tuple[dict, dict, list]:
    """``pay-1`` approved; the options of a tool whose function will move its lease into
    the past (as if its process had been paused past it) and work on long enough for a
    heartbeat to come and be refused; and the keys ``verify`` was asked about."""
    op = ovs.propose(run_id, "pay-1", "supplier.pay", PAYMENT, rollback_kind="none")
    decide_on(Operation.objects.get(pk=op["id"]), reviewer)
    verified = []
    options = {
        "action": "supplier.pay",
        "rollback_kind": "none",
        "verify": lambda arguments, key: verified.append(key) or "applied",
        "lease_seconds": 1,
    }
    return op, options, verified


def nothing_recorded_after(lost: pytest.ExceptionInfo, op: dict, verified: list) -> None:
    """The call ended with ``StaleState`` once its function returned: it neither verified
    nor reported; the next call with the same call_id takes over."""
    assert "lapsed" in lost.value.detail
    assert verified == []
    operation = Operation.objects.get(pk=op["id"])
    assert (operation.status, operation.result) == ("in_flight", None)


@pytest.mark.parametrize("raises", [False, True])
def test_a_tool_that_lost_its_lease_records_nothing_more(
    ovs, run_id, reviewer, raises, heartbeat_refused
):
    """Whatever the function returned or raised: its lease is gone."""
    op, options, verified = losing_its_lease(ovs, run_id, reviewer)

    @ovs.tool(**options)
    def pay(invoice: str, amount: int, *, idempotency_key: str) -> dict:
        lapse(op["id"])
        assert heartbeat_refused.wait(timeout=60)
        if raises:
            raise TimeoutError("the payment service did not answer")
        return {"paid": invoice}

    with pytest.raises(StaleState) as lost:
        pay(run_id, "pay-1", **PAYMENT)
    nothing_recorded_after(lost, op, verified)


def test_an_async_tool_that_lost_its_lease_records_nothing_more(
    ovs, aovs, run_id, reviewer, heartbeat_refused
):
    op, options, verified = losing_its_lease(ovs, run_id, reviewer)

    @aovs.tool(**options)
    async def pay(invoice: str, amount: int, *, idempotency_key: str) -> dict:
        await asyncio.to_thread(lapse, op["id"])
        assert await asyncio.to_thread(heartbeat_refused.wait, 60)
        return {"paid": invoice}

    with pytest.raises(StaleState) as lost:
        asyncio.run(pay(run_id, "pay-1", **PAYMENT))
    nothing_recorded_after(lost, op, verified)


def test_a_lost_lease_stops_an_agent_framework_run_as_any_oversight_error_does(
    aovs, run_id, reviewer, heartbeat_refused
):
    """The adapter fails closed: the model is not told "Function failed" (it would go on,
    or try again under another call id); the workflow stops (set aside in ``failed``),
    and its operation waits in flight for the call made again from the last checkpoint,
    which takes over."""
    verified = []

    @supervised_tool(
        aovs,
        action="invoices.pay",
        rollback_kind="none",
        verify=lambda arguments, key: verified.append(key) or "applied",
        lease_seconds=1,
    )
    async def pay_invoice(invoice: str, amount: int, *, idempotency_key: str) -> dict:
        """Pay a supplier invoice."""
        op = await asyncio.to_thread(Operation.objects.get, call_id="pay-1")
        await asyncio.to_thread(lapse, op.pk)  # as if this process had been paused
        assert await asyncio.to_thread(heartbeat_refused.wait, 60)
        return {"paid": invoice}

    driver = WorkflowDriver(lambda: paying_workflow(pay_invoice), aovs, tools=[pay_invoice])
    assert asyncio.run(driver.start("Pay INV-7", run_id)) is None
    decide_on(Operation.objects.get(call_id="pay-1"), reviewer)
    asyncio.run(driver.poll(wait=5))
    assert "lapsed" in driver.failed[run_id]
    assert (run_id in driver.outputs, verified) == (False, [])
    assert Operation.objects.get(call_id="pay-1").status == "in_flight"


# --- the first caller is a real process, paused past its lease --------------------------


@pytest.fixture
def first_caller(live_server, client_token, ovs, run_id, reviewer, tmp_path):
    """``first_caller(*options)``: the child process, once it is about to pay, stopped
    (SIGSTOP); ``pay-1`` is approved before it starts. Woken and reaped at the end."""
    op = ovs.propose(run_id, "pay-1", "supplier.pay", PAYMENT, rollback_kind="out_of_band")
    decide_on(Operation.objects.get(pk=op["id"]), reviewer)
    started = []

    def start(*options: str):
        child = agent_child(
            "tests/agent_takeover_child.py",
            live_server.url,
            client_token,
            str(run_id),
            tmp_path,
            *options,
        )
        started.append(child)
        assert said(child) == "FIRING"
        wait_until(lambda: stopped(child.pid), message="the first caller pausing")
        return child

    yield start
    for child in started:
        child.kill()
        child.wait(timeout=10)


def woken(child) -> str:
    """What the paused process says once it carries on."""
    os.kill(child.pid, signal.SIGCONT)
    answer = said(child)
    assert child.wait(timeout=30) == 0, child.stderr.read()
    return answer


def test_a_paused_caller_and_its_takeover_pay_once_and_a_person_is_alerted(
    first_caller, ovs, run_id, tmp_path
):
    child = first_caller()
    calls = []
    pay = pay_tool(ovs, tmp_path, deduplicates=False, before=lambda: calls.append("pay"))
    with pytest.raises(VerificationFailed) as failed:
        pay(run_id, "pay-1", **PAYMENT)
    assert failed.value.outcome == "alerted"
    assert woken(child) == "refused: stale_version"
    assert calls == []
    assert len((tmp_path / "ledger").read_text().splitlines()) == 1
    op = Operation.objects.get(call_id="pay-1")
    assert (op.status, op.result["effect"]) == ("alerted", "uncertain")
    assert Alert.objects.get(operation=op).status == "open"


def test_where_the_target_deduplicates_the_takeover_pays_and_it_commits(
    first_caller, ovs, run_id, tmp_path
):
    child = first_caller("--deduplicates")
    pay = pay_tool(ovs, tmp_path, deduplicates=True)
    assert pay(run_id, "pay-1", **PAYMENT) == {"paid": "INV-7"}
    assert woken(child) == "refused: stale_version"
    assert len((tmp_path / "ledger").read_text().splitlines()) == 1
    op = Operation.objects.get(call_id="pay-1")
    assert (op.status, op.fencing_epoch) == ("committed", 2)
    assert not Alert.objects.exists()
