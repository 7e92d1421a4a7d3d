"""`bin/demo --langgraph` (`manage.py demo --langgraph`): beside the scripted agent, the
example LangGraph agent asks the reviewers which invoice to pay, proposes the payment,
and ends with its thread, checkpointed in the demo's database; the demo goes on."""

import signal
import time

import pytest

from graphs.models import GraphCheckpoint
from runs.management.commands.demo import LANGGRAPH_THREADS
from runs.models import HumanRequest, Operation, Run
from tests.helpers import decide_on
from tests.langgraph_helpers import choose
from tests.processes import eventually, manage
from tests.test_demo_chaos import free_port, start

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_the_demo_runs_the_langgraph_example_to_the_end(monkeypatch, django_user_model):
    monkeypatch.setenv("OVERSIGHT_DEMO_PASSWORD", "langgraph-demo-password")
    addr = f"127.0.0.1:{free_port()}"
    demo = start("demo", "--langgraph", "--addr", addr, "--target-port", str(free_port()))
    try:
        asked = HumanRequest.objects.filter(
            run__external_id__startswith=LANGGRAPH_THREADS, status="open"
        )
        thread = eventually(asked.first, "the LangGraph agent's question", demo, 60).run.external_id
        reviewer = django_user_model.objects.get(username="reviewer")
        choose(thread, reviewer, "INV-7")
        payment = Operation.objects.filter(run__external_id=thread, status="proposed")
        decide_on(eventually(payment.first, "the LangGraph agent's payment", demo, 60), reviewer)
        ended = Run.objects.filter(external_id=thread, status="completed")
        eventually(ended.exists, "the end of the LangGraph agent's run", demo, 60)
        time.sleep(1.5)  # the supervisor sees the agent exit
        assert demo.poll() is None  # the demo goes on without it
    finally:
        demo.send_signal(signal.SIGTERM)
        _, err = demo.communicate(timeout=30)
    assert "langgraph finished" in err
    assert "restarting" not in err
    paid = Operation.objects.get(run__external_id=thread, status="committed")
    assert paid.arguments == {"invoice": "INV-7", "amount": 45}
    assert GraphCheckpoint.objects.filter(thread_id=thread).count() >= 6
    assert manage("check_invariants").returncode == 0
