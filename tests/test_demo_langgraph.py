"""`bin/demo --langgraph` (`manage.py demo --langgraph`): beside the scripted agent, the
example LangGraph agent asks the reviewers which invoice to pay, proposes the payment,
and ends with its thread, checkpointed in the demo's database; the demo goes on."""

import signal
import subprocess

import pytest

from graphs.models import GraphCheckpoint
from runs.management.commands.demo import LANGGRAPH_THREADS
from runs.models import HumanRequest, Operation, Run
from tests.helpers import decide_on
from tests.langgraph_helpers import choose
from tests.processes import (
    Output,
    eventually,
    free_port,
    manage,
    manage_started,
    wait_until,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]


def start_demo() -> tuple[subprocess.Popen, Output]:
    """The demo with the LangGraph agent, on ports found free, and what it says."""
    process = manage_started(
        "demo", "--langgraph", "--addr", f"127.0.0.1:{free_port()}",
        "--target-port", str(free_port()), stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return process, Output(process.stderr)


def demo_asking() -> tuple[subprocess.Popen, Output, HumanRequest]:
    """The demo, what it says, and the LangGraph agent's question. The demo's servers
    cannot bind port 0 (the agents are told their address first), so they get ports
    found free, which another process may take first: the demo then stops at once
    saying so, and is started again on others."""
    asked = HumanRequest.objects.filter(
        run__external_id__startswith=LANGGRAPH_THREADS, status="open"
    )
    for _ in range(3):
        process, said = start_demo()
        found = wait_until(
            lambda process=process: asked.first() or process.poll() is not None,
            120,
            "the LangGraph agent's question",
        )
        if isinstance(found, HumanRequest):
            return process, said, found
        assert "already in use" in said.text(), said.text()
    raise AssertionError("three demos in a row found a port taken")


def test_the_demo_runs_the_langgraph_example_to_the_end(monkeypatch, django_user_model):
    monkeypatch.setenv("OVERSIGHT_DEMO_PASSWORD", "langgraph-demo-password")
    demo, said, question = demo_asking()
    try:
        thread = question.run.external_id
        reviewer = django_user_model.objects.get(username="reviewer")
        choose(thread, reviewer, "INV-7")
        payment = Operation.objects.filter(run__external_id=thread, status="proposed")
        decide_on(eventually(payment.first, "the LangGraph agent's payment", demo, 60), reviewer)
        ended = Run.objects.filter(external_id=thread, status="completed")
        eventually(ended.exists, "the end of the LangGraph agent's run", demo, 60)
        said.wait_for("langgraph finished", demo)
        assert demo.poll() is None  # the demo goes on without it
    finally:
        demo.send_signal(signal.SIGTERM)
        demo.wait(timeout=60)
    assert "restarting" not in said.text()
    paid = Operation.objects.get(run__external_id=thread, status="committed")
    assert paid.arguments == {"invoice": "INV-7", "amount": 45}
    assert GraphCheckpoint.objects.filter(thread_id=thread).count() >= 6
    assert manage("check_invariants").returncode == 0
