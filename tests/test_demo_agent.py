"""The demo's scripted agent finishes its runs as it read them a moment ago; when the
run moved on in between (an admin cancelled it, an alert was raised), the finish is
refused and the agent keeps going. Before, the refusal ended the agent's process
(``test_demo_chaos`` met it when a worker died mid-effect)."""

import pytest

from oversight_client import Oversight
from runs.actors import Actor
from runs.demo.agent import DemoAgent
from runs.models import Alert, Operation, Run
from runs.services.alerts import raise_alert, resolve_alert
from runs.services.runs import cancel_run
from runs.transitions import transition_operation
from tests.client_helpers import NOTE
from tests.helpers import decide_on

pytestmark = pytest.mark.django_db(transaction=True)
pytest_plugins = ["tests.client_helpers"]
WORKER = Actor.worker("test-worker")
NOWHERE = "http://127.0.0.1:9"  # No scenario runs: the tests call finish_settled_runs.


@pytest.fixture
def agent(ovs: Oversight) -> DemoAgent:
    return DemoAgent(ovs, NOWHERE)


def test_a_run_cancelled_after_the_agent_read_it_is_left_as_it_ended(
    agent, admin_user, monkeypatch
):
    run = Run.objects.get(pk=agent.begin("Publish the status"))
    read = agent.client.run

    def read_then_cancel(run_id: int) -> dict:
        answer = read(run_id)
        cancel_run(run=run, actor=Actor.of_user(admin_user), reason="not today")
        return answer

    monkeypatch.setattr(agent.client, "run", read_then_cancel)

    assert agent.finish_settled_runs() == 0

    run.refresh_from_db()
    assert (run.status, run.outcome) == ("cancelled", "not today")
    assert agent.runs == set()


def test_a_run_an_alert_holds_is_finished_once_a_person_resolved_it(
    agent, reviewer, admin_user, monkeypatch
):
    """The API's answer in test_demo_chaos: the run still running, its last operation
    already alerted (the run's row and its operations were read a moment apart)."""
    run_id = agent.begin("Append to the notes")
    agent.client.propose(run_id, "note-1", NOTE["action"], {"text": "hi"}, rollback_kind="in_band")
    operation = Operation.objects.get(call_id="note-1")
    decide_on(operation, reviewer)
    for status in (Operation.Status.IN_FLIGHT, Operation.Status.VERIFY_FAILED):
        transition_operation(operation=operation, to=status, actor=WORKER, reason="executing")
    read = agent.client.run

    def read_across_the_alert(run_id: int) -> dict:
        before = read(run_id)
        raise_alert(operation=operation, actor=WORKER, summary="no undo", state_left={})
        after = read(run_id)
        return {**before, **{k: after[k] for k in ("pending_operations", "recovery")}}

    monkeypatch.setattr(agent.client, "run", read_across_the_alert)

    assert agent.finish_settled_runs() == 0  # Refused: the alert holds the run.

    assert Run.objects.get(pk=run_id).status == "waiting"
    assert agent.runs == {run_id}
    monkeypatch.setattr(agent.client, "run", read)
    resolve_alert(alert=Alert.objects.get(), user=admin_user, note="undone by hand")

    agent.finish_settled_runs()

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.outcome) == ("partial", "Not every operation went through: alerted")
    assert agent.runs == set()
