"""Across the agent API: Idempotency-Key replays of every mutating endpoint, and two
processes proposing the same call at once."""

import json
import subprocess
import sys

import pytest

from runs.models import AgentToken, ApiReplay, Artifact, Operation, Session
from tests.api_helpers import Api, agent_proposal, artifact_body, problem, proposal
from tests.helpers import decide_on, stored
from tests.processes import ROOT, child_env

pytest_plugins = ["tests.api_helpers"]


def everything() -> tuple:
    return (*stored(), Session.objects.count(), Artifact.objects.count())


def agent_operation(api: Api, run, reviewer, *steps: tuple[str, dict]) -> int:
    """An approved agent-executed operation, taken through ``steps`` (endpoint, body)."""
    op_id = api.propose(run.pk, agent_proposal()).json()["id"]
    decide_on(Operation.objects.get(pk=op_id), reviewer)
    for step, body in steps:
        assert api.post(f"/operations/{op_id}/{step}", body).status_code == 200
    return op_id


CLAIMED = ("claim", {})
UNVERIFIED = ("report", {"epoch": 1, "verified": False})


@pytest.fixture
def mutation(api, run, reviewer):
    """``mutation(name)``: a first request (path, body) to one mutating endpoint."""

    def make(name: str) -> tuple[str, dict]:
        if name == "open session":
            return "/sessions", {"title": "Once"}
        if name == "start run":
            return "/runs", {"session": run.session_id, "goal": "Once"}
        if name == "append message":
            return f"/runs/{run.pk}/messages", {"payload": {"text": "once"}}
        if name == "propose":
            return f"/runs/{run.pk}/operations", {
                **proposal("call-1"),
                "base_version": api.run_version(run.pk),
            }
        if name == "finish run":
            return f"/runs/{run.pk}/finish", {"status": "completed"}
        if name == "upload artifact":
            return f"/runs/{run.pk}/artifacts", artifact_body(b"once")
        if name == "claim":
            return f"/operations/{agent_operation(api, run, reviewer)}/claim", {}
        if name == "intent":
            op_id = agent_operation(api, run, reviewer, CLAIMED)
            return f"/operations/{op_id}/intent", {"epoch": 1, "snapshot": {"head": "abc"}}
        if name == "report":
            op_id = agent_operation(api, run, reviewer, CLAIMED)
            return f"/operations/{op_id}/report", {"epoch": 1, "verified": True}
        op_id = agent_operation(api, run, reviewer, CLAIMED, UNVERIFIED)
        return f"/operations/{op_id}/rollback", {"epoch": 1, "outcome": "alert"}

    return make


MUTATIONS = [
    "open session",
    "start run",
    "append message",
    "propose",
    "finish run",
    "upload artifact",
    "claim",
    "intent",
    "report",
    "rollback",
]


@pytest.mark.parametrize("name", MUTATIONS)
def test_a_retry_with_the_same_key_replays_the_first_answer(api, mutation, name):
    path, body = mutation(name)
    first = api.post(path, body, key="retry-1")
    assert first.status_code in (200, 201), first.content
    assert "Idempotent-Replayed" not in first
    before = everything()
    again = api.post(path, body, key="retry-1")
    assert (again.status_code, again.content) == (first.status_code, first.content)
    assert again["Idempotent-Replayed"] == "true"
    assert again["Content-Type"] == first["Content-Type"]
    assert everything() == before


def test_a_refusal_is_replayed_too(api, run):
    body = {**proposal("call-1"), "base_version": 0}
    first = api.post(f"/runs/{run.pk}/operations", body, key="stale-1")
    assert problem(first, 409)["error"] == "stale_version"
    again = api.post(f"/runs/{run.pk}/operations", body, key="stale-1")
    assert (again.status_code, again.content) == (409, first.content)
    assert again["Idempotent-Replayed"] == "true"


def test_a_retry_without_a_key_is_a_new_request(api, run):
    first = api.post(f"/runs/{run.pk}/messages", {"payload": {"text": "hi"}})
    again = api.post(f"/runs/{run.pk}/messages", {"payload": {"text": "hi"}})
    assert (first.json()["seq"], again.json()["seq"]) == (1, 2)


@pytest.mark.parametrize(
    "other",
    [
        ("/runs/{run}/messages", {"payload": {"text": "something else"}}),
        ("/runs/{run}/finish", {"status": "completed"}),
    ],
    ids=["another body", "another endpoint"],
)
def test_a_key_reused_for_another_request_is_refused(api, run, other):
    api.post(f"/runs/{run.pk}/messages", {"payload": {"text": "hi"}}, key="k-1")
    before = everything()
    path, body = other
    response = api.post(path.format(run=run.pk), body, key="k-1")
    assert problem(response, 422, "Idempotency-Key")["error"] == "idempotency_key_reused"
    assert everything() == before


def test_keys_belong_to_their_token(api, project, owner, run):
    _, plain = AgentToken.issue(project=project, name="second", owner=owner)
    first = api.post("/sessions", {"title": "Same"}, key="k-1")
    second = Api(plain).post("/sessions", {"title": "Same"}, key="k-1")
    assert second.status_code == 201
    assert "Idempotent-Replayed" not in second
    assert first.json()["id"] != second.json()["id"]
    assert Session.objects.count() == 3


def test_a_revoked_token_gets_no_replay(api, agent_token, run):
    body = {"payload": {"text": "hi"}}
    assert api.post(f"/runs/{run.pk}/messages", body, key="k-1").status_code == 201
    agent_token.revoke()
    response = api.post(f"/runs/{run.pk}/messages", body, key="k-1")
    assert problem(response, 401)["error"] == "unauthenticated"


def test_an_overlong_key_is_refused(api, run):
    response = api.post(f"/runs/{run.pk}/messages", {"payload": {"text": "hi"}}, key="k" * 201)
    problem(response, 422, "Idempotency-Key")
    assert not ApiReplay.objects.exists()


def test_reads_ignore_the_key(api, run):
    api.get(f"/runs/{run.pk}", key="read-1")
    response = api.get(f"/runs/{run.pk}", key="read-1")
    assert response.status_code == 200
    assert "Idempotent-Replayed" not in response
    assert not ApiReplay.objects.exists()


# --- two processes, one call -----------------------------------------------------------------

CHILD = """
import json, sys
import django
django.setup()
from django.test import Client
from django.test.utils import setup_test_environment
setup_test_environment()
path, token = sys.argv[1], sys.argv[2]
client = Client()
print("READY", flush=True)
body = sys.stdin.readline()
response = client.post(
    path, body, content_type="application/json", headers={"Authorization": "Bearer " + token}
)
print(json.dumps({"status": response.status_code, "body": response.json()}), flush=True)
"""


def start_child(path: str, token: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, path, token],
        cwd=ROOT,
        env=child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("attempt", range(3))
def test_two_processes_proposing_the_same_call_make_one_operation(api, agent_token, run, attempt):
    body = {**agent_proposal("call-race"), "base_version": api.run_version(run.pk)}
    children = [start_child(f"/api/v1/runs/{run.pk}/operations", agent_token.plain) for _ in "ab"]
    for child in children:
        line = child.stdout.readline().strip()
        assert line == "READY", child.stderr.read()
    for child in children:  # Both are set up; let them go at once.
        child.stdin.write(json.dumps(body) + "\n")
        child.stdin.flush()
    answers = []
    for child in children:
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
        answers.append(json.loads(out.strip().splitlines()[-1]))

    assert {a["status"] for a in answers} <= {200, 201}
    assert 201 in {a["status"] for a in answers}
    operations = Operation.objects.filter(run=run, call_id="call-race")
    assert operations.count() == 1
    assert {a["body"]["id"] for a in answers} == {operations.get().pk}
    assert operations.get().checkpoints.filter(event="operation.proposed").count() == 1
