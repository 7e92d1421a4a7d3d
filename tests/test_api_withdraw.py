"""What a proposal says and gives back: its summary and rationale, one ``output`` for
both executors, and its withdrawal by the agent before anything fired."""

import pytest

from runs.models import Operation, Run
from tests.api_helpers import Api, ServerAgent, agent_proposal, problem
from tests.helpers import decide_on

pytest_plugins = ["tests.api_helpers"]


@pytest.fixture
def run_id(api: Api) -> int:
    session = api.post("/sessions", {}).json()["id"]
    return api.post("/runs", {"session": session, "goal": "Ship it"}).json()["id"]


def test_a_proposal_carries_its_summary_and_rationale(api, run_id):
    why = {"summary": "Push the fix", "rationale": "Tests pass <b>and</b> the user asked."}
    op = api.propose(run_id, agent_proposal(**why)).json()
    assert {k: op[k] for k in why} == why
    stored = Operation.objects.get(pk=op["id"])
    assert (stored.summary, stored.rationale) == (why["summary"], why["rationale"])
    problem(api.propose(run_id, agent_proposal("c2", summary="x" * 301)), 422, "summary")


def test_the_output_of_an_agent_executed_operation_is_what_it_reported(api, run_id, reviewer):
    op = api.propose(run_id, agent_proposal()).json()
    assert op["output"] is None
    decide_on(Operation.objects.get(pk=op["id"]), reviewer)
    api.post(f"/operations/{op['id']}/claim", {})
    api.post(f"/operations/{op['id']}/intent", {"epoch": 1})
    report = {"epoch": 1, "effect": "applied", "output": {"sha": "abc123"}}
    assert api.post(f"/operations/{op['id']}/report", report).json()["output"] == {"sha": "abc123"}
    assert api.get(f"/operations/{op['id']}").json()["output"] == {"sha": "abc123"}


def test_the_output_of_a_server_executed_operation_is_what_the_action_returned(
    api, reviewer, accounts
):
    op = ServerAgent(api, reviewer).executed(
        "pay", "ledger.transfer", {"from": "A", "to": "B", "amount": "10.00"}, "compensating"
    )
    assert op["status"] == "committed"
    assert op["output"] == {"entry": op["result"]["output"]["entry"], "amount": "10.00"}


def test_withdrawing_a_proposal_cancels_it_and_ends_the_runs_wait(api, run_id):
    op = api.propose(run_id, agent_proposal()).json()
    assert api.get(f"/runs/{run_id}").json()["reason"] == "approval"
    answer = api.post(f"/operations/{op['id']}/withdraw", {"reason": "the user changed course"})
    assert answer.status_code == 200, answer.content
    assert (answer.json()["status"], answer.json()["status_reason"]) == (
        "cancelled",
        "the user changed course",
    )
    assert api.get(f"/runs/{run_id}").json()["status"] == "queued"
    again = api.post(f"/operations/{op['id']}/withdraw", {})
    assert (again.status_code, again.json()["version"]) == (200, answer.json()["version"])


def test_an_approved_operation_can_be_withdrawn_before_it_is_claimed(api, run_id, reviewer):
    op = api.propose(run_id, agent_proposal()).json()
    decide_on(Operation.objects.get(pk=op["id"]), reviewer)
    assert api.post(f"/operations/{op['id']}/withdraw", {}).json()["status"] == "cancelled"
    problem(api.post(f"/operations/{op['id']}/claim", {}), 409)


def test_a_claimed_operation_cannot_be_withdrawn(api, run_id, reviewer):
    op = api.propose(run_id, agent_proposal()).json()
    decide_on(Operation.objects.get(pk=op["id"]), reviewer)
    api.post(f"/operations/{op['id']}/claim", {})
    body = problem(api.post(f"/operations/{op['id']}/withdraw", {}), 409)
    assert "in_flight" in body["detail"]
    assert Operation.objects.get(pk=op["id"]).status == Operation.Status.IN_FLIGHT


def test_a_rejected_operation_cannot_be_withdrawn(api, run_id, reviewer):
    op = api.propose(run_id, agent_proposal()).json()
    decide_on(Operation.objects.get(pk=op["id"]), reviewer, kind="reject", comment="no")
    assert "rejected" in problem(api.post(f"/operations/{op['id']}/withdraw", {}), 409)["detail"]


def test_another_tokens_operation_cannot_be_withdrawn(api, other_api, run_id):
    op = api.propose(run_id, agent_proposal()).json()
    problem(other_api.post(f"/operations/{op['id']}/withdraw", {}), 404)
    problem(api.post(f"/operations/{op['id']}/withdraw", {"reason": "x" * 4001}), 422, "reason")
    assert Operation.objects.get(pk=op["id"]).status == Operation.Status.PROPOSED


# --- reading a run's messages -----------------------------------------------------------


def test_an_agent_reads_its_runs_messages_in_pages(api, run_id):
    for text in ("one", "two", "three"):
        api.post(f"/runs/{run_id}/messages", {"payload": {"text": text}})
    page = api.get(f"/runs/{run_id}/messages", {"after": 1, "limit": 1}).json()
    assert [(m["seq"], m["payload"], m["kind"], m["author"], m["author_kind"]) for m in page] == [
        (2, {"text": "two"}, "agent", "test-agent", "agent")
    ]
    everything = api.get(f"/runs/{run_id}/messages").json()
    assert [m["seq"] for m in everything] == [1, 2, 3]


def test_messages_of_another_tokens_run_are_not_found(api, other_api, run_id):
    problem(other_api.get(f"/runs/{run_id}/messages"), 404)
    problem(api.get(f"/runs/{run_id}/messages", {"limit": 0}), 422, "limit")
    problem(api.get(f"/runs/{run_id}/messages", {"after": 2**63}), 422, "after")
    assert Run.objects.get(pk=run_id).messages.count() == 0
