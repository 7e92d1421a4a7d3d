"""External ids: an agent names its sessions, runs and operations with its own ids (a
framework's thread or interrupt id), creates them again safely, and finds them by
those ids; another token's names are neither found nor revealed."""

import json
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from runs.models import Operation, Run, Session
from runs.services import identity
from tests.api_helpers import PREFIX, Api, agent_proposal, problem
from tests.conftest import issued

pytest_plugins = ["tests.api_helpers"]


def new_run(api: Api, **fields) -> dict:
    session = api.post("/sessions", {"title": "work"}).json()["id"]
    response = api.post("/runs", {"session": session, "goal": "do it", **fields})
    assert response.status_code == 201, response.content
    return response.json()


# --- sessions ---------------------------------------------------------------------------


def test_opening_a_session_twice_by_external_id_gives_one_session(api):
    body = {"title": "Thread", "external_id": "thread-7"}
    first, again = api.post("/sessions", body), api.post("/sessions", body)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json() == again.json()
    assert first.json()["external_id"] == "thread-7"
    assert Session.objects.filter(external_id="thread-7").count() == 1


def test_a_session_external_id_naming_something_else_is_a_conflict(api):
    api.post("/sessions", {"title": "Thread", "external_id": "thread-7"})
    body = problem(api.post("/sessions", {"title": "Other", "external_id": "thread-7"}), 409)
    assert body["error"] == "external_id_conflict"
    assert Session.objects.count() == 1


def test_another_projects_external_id_does_not_collide(api, other_api):
    other_api.post("/sessions", {"title": "Theirs", "external_id": "thread-7"})
    mine = api.post("/sessions", {"title": "Mine", "external_id": "thread-7"})
    assert mine.status_code == 201
    assert [s["title"] for s in api.get("/sessions", {"external_id": "thread-7"}).json()] == [
        "Mine"
    ]


def test_sessions_without_external_id_are_never_merged(api):
    api.post("/sessions", {"title": "a"})
    assert api.post("/sessions", {"title": "a"}).status_code == 201
    assert Session.objects.count() == 2


def test_finding_a_session_needs_its_external_id(api):
    assert api.get("/sessions", {"external_id": "nope"}).json() == []
    problem(api.get("/sessions"), 422, "external_id")
    problem(api.get("/sessions", {"external_id": "x" * 201}), 422, "external_id")
    problem(api.post("/sessions", {"external_id": "x" * 201}), 422, "external_id")


# --- runs -------------------------------------------------------------------------------


def test_starting_a_run_twice_by_external_id_gives_one_run(api):
    session = api.post("/sessions", {}).json()["id"]
    body = {"session": session, "goal": "Pay", "external_id": "graph-run-1"}
    first, again = api.post("/runs", body), api.post("/runs", body)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["external_id"] == "graph-run-1"
    found = api.get("/runs", {"external_id": "graph-run-1"}).json()
    assert [run["id"] for run in found] == [first.json()["id"]]
    other_goal = api.post("/runs", {**body, "goal": "Refund"})
    assert problem(other_goal, 409)["error"] == "external_id_conflict"
    assert Run.objects.count() == 1


def test_runs_are_found_only_by_their_own_token(api, project, owner):
    new_run(api, external_id="graph-run-1")
    other = Api(issued(project, "other-agent", owner).plain)
    assert other.get("/runs", {"external_id": "graph-run-1"}).json() == []
    problem(other.get("/runs"), 422, "external_id")


# --- operations -------------------------------------------------------------------------


def test_proposing_twice_by_external_id_gives_one_operation(api):
    run = new_run(api)["id"]
    body = agent_proposal("call-1", external_id="interrupt-1", base_version=2)
    first, again = api.propose(run, body), api.propose(run, body)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    changed = agent_proposal("call-1", external_id="interrupt-1", arguments={"branch": "dev"})
    assert problem(api.propose(run, changed), 409)["error"] == "external_id_conflict"
    renamed = agent_proposal("call-1", external_id="interrupt-2", base_version=2)
    assert problem(api.propose(run, renamed), 409)["error"] == "external_id_conflict"
    assert Operation.objects.count() == 1


def test_an_operation_is_found_by_external_id_or_by_call_id(api, project, owner):
    run = new_run(api)["id"]
    op = api.propose(run, agent_proposal("call-1", external_id="interrupt-1")).json()
    assert api.get("/operations", {"external_id": "interrupt-1"}).json() == [op]
    assert api.get("/operations", {"run": run, "call_id": "call-1"}).json() == [op]
    assert api.get("/operations", {"run": run, "call_id": "call-2"}).json() == []
    other = Api(issued(project, "other-agent", owner).plain)
    assert other.get("/operations", {"external_id": "interrupt-1"}).json() == []
    assert other.get("/operations", {"run": run, "call_id": "call-1"}).json() == []


@pytest.mark.parametrize(
    "query",
    [{}, {"run": 1}, {"call_id": "c"}, {"external_id": "e", "run": 1, "call_id": "c"}],
)
def test_finding_an_operation_needs_one_filter(api, query):
    problem(api.get("/operations", query), 422, "external_id")


# --- races ------------------------------------------------------------------------------


def test_a_create_that_loses_the_race_answers_the_winners_object(api, agent_token, monkeypatch):
    """Another request inserts the name between this one's look and its insert: the
    insert fails at the constraint, and the existing session is answered, not a 500."""
    look = identity._existing

    def raced(model, project_id, token, external_id, describes):
        monkeypatch.setattr(identity, "_existing", look)
        Session.objects.create(
            project=agent_token.project,
            owner=agent_token.owner,
            agent="test-agent",
            title="Thread",
            token=agent_token,
            external_id=external_id,
        )
        return None

    monkeypatch.setattr(identity, "_existing", raced)
    answer = api.post("/sessions", {"title": "Thread", "external_id": "thread-7"})
    assert answer.status_code == 200, answer.content
    assert list(Session.objects.values_list("pk", flat=True)) == [answer.json()["id"]]


@pytest.mark.django_db(transaction=True)
def test_concurrent_creates_of_one_external_id_make_one_session(agent_token, live_server):
    def create(_: int) -> int:
        request = urllib.request.Request(
            f"{live_server.url}{PREFIX}/sessions",
            data=json.dumps({"title": "Thread", "external_id": "thread-7"}).encode(),
            headers={
                "Authorization": f"Bearer {agent_token.plain}",
                "Content-Type": "application/json",
            },
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code

    with ThreadPoolExecutor(max_workers=6) as pool:
        statuses = sorted(pool.map(create, range(6)))
    assert statuses == [200] * 5 + [201]
    assert Session.objects.filter(external_id="thread-7").count() == 1
