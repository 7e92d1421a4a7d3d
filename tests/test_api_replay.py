"""The Idempotency-Key: a retry of a mutating request gets the first answer, and the
key, the request's writes and the stored answer commit together or not at all — after
a server error, a process killed mid-request, or with a retry racing the first attempt."""

import json
import signal
import subprocess
import threading
import urllib.error
import urllib.request
from datetime import timedelta

import pytest
from django.db import connections
from django.test import Client
from django.utils import timezone

from runs.api import endpoints, schemas
from runs.engine.worker import Worker
from runs.models import AgentToken, ApiReplay, Artifact, Operation, Session
from tests.api_helpers import PREFIX, Api, agent_proposal, artifact_body, problem, proposal
from tests.helpers import decide_on, stored
from tests.overlap import Timeline, assert_overlapped, attempt, hold_until_waited_on
from tests.processes import Output, listening_port, manage_started, spawn

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
INTENDED = ("intent", {"epoch": 1, "snapshot": {"head": "abc"}})
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
            op_id = agent_operation(api, run, reviewer, CLAIMED, INTENDED)
            return f"/operations/{op_id}/report", {"epoch": 1, "verified": True}
        op_id = agent_operation(api, run, reviewer, CLAIMED, INTENDED, UNVERIFIED)
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


# --- the answer commits with the writes, or nothing does ------------------------------------


def test_a_server_error_after_the_writes_leaves_nothing_and_the_retry_runs_once(
    agent_token, run, monkeypatch
):
    api = Api(agent_token.plain, Client(raise_request_exception=False))
    path, body = f"/runs/{run.pk}/messages", {"payload": {"text": "once"}}
    before = everything()

    def unserialisable(**fields):
        raise RuntimeError("the reply could not be serialised")

    with monkeypatch.context() as patch:
        patch.setattr(schemas, "MessageOut", unserialisable)
        assert api.post(path, body, key="k-1").status_code == 500
    assert everything() == before
    assert not ApiReplay.objects.exists()

    again = api.post(path, body, key="k-1")
    assert (again.status_code, again.json()["seq"]) == (201, 1)
    assert "Idempotent-Replayed" not in again
    assert list(run.messages.values_list("seq", flat=True)) == [1]


@pytest.fixture
def start_server():
    """``start_server(command)``: a process serving the API on the port the system gives
    it (``command("127.0.0.1:0")``), stopped at the end of the test; returns it and the
    API's base URL."""
    processes = []

    def start(command) -> tuple[subprocess.Popen, str]:
        process = command("127.0.0.1:0")
        processes.append(process)
        port = listening_port(Output(process.stdout), process)
        return process, f"http://127.0.0.1:{port}{PREFIX}"

    yield start
    for process in processes:
        process.kill()
        process.wait(timeout=10)


def post(url: str, body: dict, token: str, key: str) -> tuple[int, dict, dict]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Idempotency-Key": key,
        },
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read())


def runserver(address: str) -> subprocess.Popen:
    return manage_started("runserver", "--noreload", address)


@pytest.mark.django_db(transaction=True)
def test_a_server_killed_after_the_write_leaves_nothing_and_the_retry_runs_once(
    agent_token, run, start_server
):
    body = {"payload": {"text": "once"}}
    dying, base = start_server(lambda address: spawn("api-dies-after-append", address))
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        post(f"{base}/runs/{run.pk}/messages", body, agent_token.plain, "k-1")
    assert dying.wait(timeout=10) == -signal.SIGKILL
    left = (run.messages.count(), ApiReplay.objects.count())
    # Long enough for any reservation to count as abandoned.
    ApiReplay.objects.update(created_at=timezone.now() - timedelta(hours=1))

    _, base = start_server(runserver)
    status, headers, answer = post(f"{base}/runs/{run.pk}/messages", body, agent_token.plain, "k-1")
    assert list(run.messages.values_list("seq", flat=True)) == [1]
    assert (status, answer["seq"]) == (201, 1)
    assert "Idempotent-Replayed" not in headers
    assert left == (0, 0)


@pytest.mark.django_db(transaction=True)
def test_a_retry_sent_while_the_first_attempt_runs_waits_for_its_answer(
    agent_token, run, monkeypatch
):
    """The retry arrives while the first attempt holds its transaction, and the first
    goes on only once the retry waits for it."""
    path, body = f"/runs/{run.pk}/messages", {"payload": {"text": "once"}}
    timeline = Timeline()
    append = endpoints.append_message

    def slow_append(**kwargs):
        message = append(**kwargs)
        timeline.mark("first appended")
        hold_until_waited_on(timeline, "retry", holder="first")
        return message

    monkeypatch.setattr(endpoints, "append_message", slow_append)
    answers = {}

    def send(name: str) -> None:
        try:
            with attempt(timeline, name):
                answers[name] = Api(agent_token.plain).post(path, body, key="k-1")
        finally:
            connections.close_all()

    first = threading.Thread(target=send, args=["first"])
    first.start()
    assert timeline.wait_for("first appended")
    retry = threading.Thread(target=send, args=["retry"])
    retry.start()
    for thread in (first, retry):
        thread.join(timeout=90)

    assert_overlapped(timeline, "retry", holder="first")
    assert answers["first"].status_code == 201, answers["first"].content
    assert (answers["retry"].status_code, answers["retry"].content) == (
        201,
        answers["first"].content,
    )
    assert "Idempotent-Replayed" not in answers["first"]
    assert answers["retry"]["Idempotent-Replayed"] == "true"
    assert list(run.messages.values_list("seq", flat=True)) == [1]


# --- stored answers expire -----------------------------------------------------------------


def age(key: str, by: timedelta) -> None:
    ApiReplay.objects.filter(key=key).update(created_at=timezone.now() - by)


def test_an_answer_older_than_the_ttl_is_not_replayed(api, run, settings):
    path, body = f"/runs/{run.pk}/messages", {"payload": {"text": "hi"}}
    assert api.post(path, body, key="k-1").json()["seq"] == 1
    age("k-1", settings.OVERSIGHT_API_REPLAY_TTL + timedelta(minutes=1))

    again = api.post(path, body, key="k-1")

    assert (again.status_code, again.json()["seq"]) == (201, 2)
    assert "Idempotent-Replayed" not in again
    assert api.post(path, body, key="k-1")["Idempotent-Replayed"] == "true"  # The new one.


def test_housekeeping_deletes_expired_answers_and_keeps_the_others(api, run, settings):
    for key in ("old", "recent"):
        api.post(f"/runs/{run.pk}/messages", {"payload": {"text": key}}, key=key)
    age("old", settings.OVERSIGHT_API_REPLAY_TTL + timedelta(minutes=1))
    age("recent", settings.OVERSIGHT_API_REPLAY_TTL - timedelta(minutes=1))

    Worker(name="w1").housekeeping()

    assert list(ApiReplay.objects.values_list("key", flat=True)) == ["recent"]
