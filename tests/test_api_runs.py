"""The agent API's sessions, runs, messages, checkpoints and artifacts; request limits;
and the OpenAPI document with its locally served docs page."""

import hashlib
import itertools
import json
import re

import pytest
from django.contrib.staticfiles import finders
from django.test import Client

from runs.models import Artifact, Message, Operation, Run, Session
from runs.services.runs import cancel_run, finish_run
from tests.api_helpers import Api, agent_proposal, artifact_body, nested, problem
from tests.conftest import AGENT
from tests.helpers import decide_on, stored

pytest_plugins = ["tests.api_helpers"]


def finished(run: Run, status: str = "completed") -> Run:
    if status == "cancelled":
        return cancel_run(run=run, actor=AGENT, reason="stop")
    return finish_run(run=run, status=status, actor=AGENT, outcome="done")


# --- sessions ---------------------------------------------------------------------------


def test_open_a_session(api, project, owner):
    response = api.post("/sessions", {"title": "Invoices"})
    assert response.status_code == 201
    body = response.json()
    session = Session.objects.get(pk=body["id"])
    assert body == {
        "id": session.pk,
        "project": "acme",
        "agent": "test-agent",
        "title": "Invoices",
        "owner": "owner",
        "external_id": "",
    }
    assert (session.project, session.owner, session.agent) == (project, owner, "test-agent")


def test_a_session_may_name_its_agent(api):
    assert api.post("/sessions", {"agent": "planner"}).json()["agent"] == "planner"


@pytest.mark.parametrize(
    ("body", "field"),
    [({"title": "x" * 301}, "title"), ({"agent": "a" * 201}, "agent"), ({"title": 7}, "title")],
)
def test_session_fields_are_checked(api, body, field):
    problem(api.post("/sessions", body), 422, field)
    assert not Session.objects.exists()


# --- runs -------------------------------------------------------------------------------


def test_start_a_run(api, session):
    response = api.post("/runs", {"session": session.pk, "goal": "Reconcile March"})
    assert response.status_code == 201
    body = response.json()
    run = Run.objects.get(pk=body["id"])
    assert (run.session, run.goal, run.status) == (session, "Reconcile March", "running")
    assert body["status"] == "running"
    assert body["version"] == run.version == 2
    assert body["retry_of"] is None
    assert body["recovery"]["case"] == "no_decision"
    assert body["pending_operations"] == []


@pytest.mark.parametrize("status", ["failed", "cancelled"])
def test_retry_a_finished_run(api, run, status):
    finished(run, status)
    response = api.post("/runs", {"session": run.session_id, "goal": "Again", "retry_of": run.pk})
    assert response.status_code == 201
    assert response.json()["retry_of"] == run.pk
    assert Run.objects.get(pk=response.json()["id"]).retry_of == run


def test_retry_of_an_open_run_is_refused(api, run):
    body = {"session": run.session_id, "goal": "Again", "retry_of": run.pk}
    problem(api.post("/runs", body), 422, "retry_of")
    assert Run.objects.count() == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"goal": "g"}, "session"),
        ({"session": "one", "goal": "g"}, "session"),
        ({"session": 0}, "goal"),
        ({"session": 0, "goal": ""}, "goal"),
        ({"session": 0, "goal": "   "}, "goal"),
        ({"session": 0, "goal": "g" * 20_001}, "goal"),
        ({"session": 0, "goal": "g", "retry_of": "last"}, "retry_of"),
    ],
)
def test_run_fields_are_checked(api, session, body, field):
    if body.get("session") == 0:
        body["session"] = session.pk
    problem(api.post("/runs", body), 422, field)
    assert not Run.objects.exists()


@pytest.mark.parametrize("path", ["/runs/999999", "/runs/999999/checkpoints"])
def test_unknown_run_is_not_found(api, path):
    problem(api.get(path), 404)


def test_a_run_in_an_unknown_session_is_not_found(api):
    problem(api.post("/runs", {"session": 999999, "goal": "g"}), 404)


def test_read_a_run(api, run):
    body = api.get(f"/runs/{run.pk}").json()
    run.refresh_from_db()
    assert body["id"] == run.pk
    assert body["session"] == run.session_id
    assert (body["status"], body["reason"], body["version"]) == ("running", "", run.version)
    assert body["cancel_requested"] is False


def test_a_waiting_run_says_why_and_lists_its_pending_operations(api, run, propose):
    op = propose("call-1")
    body = api.get(f"/runs/{run.pk}").json()
    assert (body["status"], body["reason"]) == ("waiting", "approval")
    assert body["unblock"]
    assert [pending["id"] for pending in body["pending_operations"]] == [op.pk]
    assert body["pending_operations"][0]["status"] == "proposed"


@pytest.mark.parametrize(
    ("decision", "case", "pending"),
    [
        (None, "no_decision", True),
        ("approve", "decision_no_result", True),
        ("reject", "result_and_checkpoint", False),
    ],
)
def test_a_run_says_which_recovery_case_it_is_in(
    api, run, propose, reviewer, decision, case, pending
):
    op = propose("call-1")
    if decision:
        decide_on(op, reviewer, decision, comment="no" if decision == "reject" else "")
    body = api.get(f"/runs/{run.pk}").json()
    assert body["recovery"]["case"] == case
    assert body["recovery"]["guidance"]
    assert body["recovery"]["operations"][0]["id"] == op.pk
    assert bool(body["pending_operations"]) is pending


# --- finishing ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "outcome"),
    [("completed", ""), ("completed", "All paid."), ("partial", "Half."), ("failed", "Bank down.")],
)
def test_finish_a_run(api, run, status, outcome):
    response = api.post(f"/runs/{run.pk}/finish", {"status": status, "outcome": outcome})
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["outcome"]) == (status, outcome)
    run.refresh_from_db()
    assert (run.status, run.outcome) == (status, outcome)


def test_finishing_cancels_the_proposals_nobody_decided(api, run, propose):
    op = propose("call-1")
    response = api.post(f"/runs/{run.pk}/finish", {"status": "partial", "outcome": "gave up"})
    assert response.status_code == 200
    assert response.json()["pending_operations"] == []
    op.refresh_from_db()
    assert op.status == "cancelled"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "status"),
        ({"status": "cancelled"}, "status"),
        ({"status": "failed"}, "outcome"),
        ({"status": "partial", "outcome": "  "}, "outcome"),
        ({"status": "completed", "base_version": "latest"}, "base_version"),
    ],
)
def test_finish_fields_are_checked(api, run, body, field):
    before = stored()
    problem(api.post(f"/runs/{run.pk}/finish", body), 422, field)
    assert stored() == before


def test_finishing_from_a_stale_version_is_a_conflict(api, run):
    body = {"status": "completed", "base_version": run.version - 1}
    assert problem(api.post(f"/runs/{run.pk}/finish", body), 409)["error"] == "stale_version"
    run.refresh_from_db()
    assert run.status == "running"


def test_finishing_at_the_current_version(api, run):
    body = {"status": "completed", "base_version": api.run_version(run.pk)}
    response = api.post(f"/runs/{run.pk}/finish", body)
    assert response.status_code == 200
    assert response.json()["status"] == "completed"
    run.refresh_from_db()
    assert run.status == "completed"
    assert run.checkpoints.latest("seq").to_status == "completed"


@pytest.mark.parametrize("status", ["completed", "cancelled"])
def test_a_closed_run_cannot_finish_again(api, run, status):
    finished(run, status)
    response = api.post(f"/runs/{run.pk}/finish", {"status": "completed"})
    assert problem(response, 409)["error"] == "run_closed"


def test_a_run_with_an_operation_in_flight_cannot_finish(api, run, reviewer):
    op_id = api.propose(run.pk, agent_proposal()).json()["id"]
    decide_on(Operation.objects.get(pk=op_id), reviewer)
    assert api.post(f"/operations/{op_id}/claim", {}).status_code == 200
    response = api.post(f"/runs/{run.pk}/finish", {"status": "completed"})
    assert problem(response, 409)["error"] == "run_not_accepting"


# --- messages -------------------------------------------------------------------------------


def test_append_messages_in_order(api, run):
    seqs = [
        api.post(f"/runs/{run.pk}/messages", {"payload": {"text": f"step {n}"}}).json()["seq"]
        for n in range(3)
    ]
    assert seqs == [1, 2, 3]
    assert list(Message.objects.filter(run=run).values_list("seq", "kind", "author")) == [
        (1, "agent", "test-agent"),
        (2, "agent", "test-agent"),
        (3, "agent", "test-agent"),
    ]


def test_a_message_answers_its_seq_and_the_run_version(api, run):
    response = api.post(
        f"/runs/{run.pk}/messages",
        {"kind": "tool", "payload": {"text": "42 rows", "data": {"rows": 42}}},
    )
    assert response.status_code == 201
    run.refresh_from_db()
    assert response.json() == {"seq": 1, "run_version": run.version}
    assert Message.objects.get(run=run).payload == {"text": "42 rows", "data": {"rows": 42}}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "payload"),
        ({"payload": "hello"}, "payload"),
        ({"payload": {"text": "hi"}, "kind": "robot"}, "kind"),
        ({"payload": {"text": "hi"}, "schema_version": "one"}, "schema_version"),
    ],
)
def test_message_fields_are_checked(api, run, body, field):
    problem(api.post(f"/runs/{run.pk}/messages", body), 422, field)
    assert not Message.objects.exists()


def test_a_payload_that_breaks_its_schema_names_the_payload(api, run):
    body = problem(api.post(f"/runs/{run.pk}/messages", {"payload": {"words": "hi"}}), 422)
    assert body["field"].startswith("payload"), body
    assert "text" in body["detail"]
    assert not Message.objects.exists()


def test_an_unknown_payload_version_names_the_schema_version(api, run):
    body = {"payload": {"text": "hi"}, "schema_version": 2}
    problem(api.post(f"/runs/{run.pk}/messages", body), 422, "schema_version")
    assert not Message.objects.exists()


@pytest.mark.parametrize("status", ["completed", "cancelled"])
def test_a_closed_run_takes_no_messages(api, run, status):
    finished(run, status)
    response = api.post(f"/runs/{run.pk}/messages", {"payload": {"text": "hello?"}})
    assert problem(response, 409)["error"] == "run_closed"
    assert not Message.objects.exists()


# --- checkpoints ----------------------------------------------------------------------------


def test_list_checkpoints_in_order(api, run, propose):
    propose("call-1")
    body = api.get(f"/runs/{run.pk}/checkpoints").json()
    run.refresh_from_db()
    assert [c["seq"] for c in body] == list(range(1, run.version + 1))
    assert body[0]["event"] == "run.created"
    assert body[0]["prev_hash"] == ""
    assert all(c["prev_hash"] == p["hash"] for p, c in itertools.pairwise(body))
    assert any(c["operation"] for c in body)


def test_checkpoints_page_with_after_and_limit(api, run, propose):
    propose("call-1")
    page = api.get(f"/runs/{run.pk}/checkpoints", {"after": 1, "limit": 2}).json()
    assert [c["seq"] for c in page] == [2, 3]
    rest = api.get(f"/runs/{run.pk}/checkpoints", {"after": 3, "limit": 500}).json()
    assert [c["seq"] for c in rest] == list(range(4, run.checkpoints.count() + 1))


@pytest.mark.parametrize("limit", [0, -1, 501, "ten"])
def test_checkpoint_limit_out_of_range_is_refused(api, run, limit):
    problem(api.get(f"/runs/{run.pk}/checkpoints", {"limit": limit}), 422, "limit")


def test_checkpoint_limit_follows_the_setting(api, run, settings):
    settings.OVERSIGHT_API_MAX_PAGE = 1
    problem(api.get(f"/runs/{run.pk}/checkpoints", {"limit": 2}), 422, "limit")
    assert len(api.get(f"/runs/{run.pk}/checkpoints", {"limit": 1}).json()) == 1


# --- artifacts ------------------------------------------------------------------------------


def test_upload_and_fetch_an_artifact(api, run):
    response = api.post(f"/runs/{run.pk}/artifacts", artifact_body(b"hello\n", name="out.txt"))
    assert response.status_code == 201
    body = response.json()
    sha = hashlib.sha256(b"hello\n").hexdigest()
    run.refresh_from_db()
    assert body == {
        "name": "out.txt",
        "sha256": sha,
        "size": 6,
        "media_type": "text/plain",
        "run_version": run.version,
    }
    assert run.checkpoints.order_by("-seq").first().event == "artifact.attached"
    fetched = api.get(f"/artifacts/{sha}")
    assert fetched.status_code == 200
    assert fetched.getvalue() == b"hello\n"
    assert fetched["Content-Type"] == "text/plain"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"sha256": hashlib.sha256(b"other").hexdigest()}, "sha256"),
        ({"sha256": "ABC"}, "sha256"),
        ({"content_base64": "***not base64***"}, "content_base64"),
        ({"name": ""}, "name"),
        ({"name": "   "}, "name"),
        ({"content_base64": None}, "content_base64"),
    ],
)
def test_artifact_fields_are_checked(api, run, change, field):
    before = stored()
    problem(api.post(f"/runs/{run.pk}/artifacts", artifact_body(b"data", **change)), 422, field)
    assert stored() == before
    assert not Artifact.objects.exists()


def test_an_artifact_over_the_size_limit_is_refused(api, run, settings):
    settings.OVERSIGHT_ARTIFACT_MAX_BYTES = 10
    response = api.post(f"/runs/{run.pk}/artifacts", artifact_body(b"x" * 11))
    assert problem(response, 413, "content_base64")["error"] == "limit_exceeded"
    assert not Artifact.objects.exists()


@pytest.mark.parametrize("status", ["completed", "cancelled"])
def test_a_closed_run_takes_no_artifacts(api, run, status):
    finished(run, status)
    response = api.post(f"/runs/{run.pk}/artifacts", artifact_body(b"late"))
    assert problem(response, 409)["error"] == "run_closed"


def test_an_unknown_artifact_is_not_found(api, run):
    problem(api.get(f"/artifacts/{'0' * 64}"), 404)


def test_another_projects_artifact_is_not_found(api, other_api, other_run):
    response = other_api.post(f"/runs/{other_run.pk}/artifacts", artifact_body(b"theirs"))
    assert response.status_code == 201
    problem(api.get(f"/artifacts/{response.json()['sha256']}"), 404)
    assert other_api.get(f"/artifacts/{response.json()['sha256']}").getvalue() == b"theirs"


# --- limits ---------------------------------------------------------------------------------


@pytest.fixture
def small_bodies(settings):
    """A body limit of 2 KiB, with Django's own upload limit set as settings.py sets it."""
    settings.OVERSIGHT_API_MAX_BODY_BYTES = 2048
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2048 + 1024
    return 2048


@pytest.mark.parametrize("size", [2049, 5000])
def test_a_body_over_the_limit_is_refused_unread(api, run, small_bodies, size):
    text = "x" * size
    before = stored()
    response = api.post(f"/runs/{run.pk}/messages", {"payload": {"text": text}})
    assert problem(response, 413)["error"] == "limit_exceeded"
    assert str(small_bodies) in response.json()["detail"]
    assert stored() == before


@pytest.mark.parametrize("size", [2049, 5000])
def test_a_body_over_the_limit_is_refused_with_an_idempotency_key_too(api, run, small_bodies, size):
    before = stored()
    body = json.dumps({"payload": {"text": "x" * size}})
    response = api.client.post(
        f"/api/v1/runs/{run.pk}/messages",
        body,
        content_type="application/json",
        headers=api.headers(key="big-1"),
    )
    assert problem(response, 413)["error"] == "limit_exceeded"
    assert stored() == before


def test_a_body_under_the_limit_is_accepted(api, run, small_bodies):
    response = api.post(f"/runs/{run.pk}/messages", {"payload": {"text": "x" * 1500}})
    assert response.status_code == 201
    assert Message.objects.get(run=run, seq=response.json()["seq"]).payload["text"] == "x" * 1500


def test_a_message_payload_over_its_limit_is_refused(api, run, settings):
    settings.OVERSIGHT_API_MAX_MESSAGE_BYTES = 100
    response = api.post(f"/runs/{run.pk}/messages", {"payload": {"text": "x" * 100}})
    assert problem(response, 413, "payload")["error"] == "limit_exceeded"
    assert not Message.objects.exists()


def test_a_message_payload_nested_too_deep_is_refused(api, run, settings):
    settings.OVERSIGHT_API_MAX_DEPTH = 5
    payload = {"text": "deep", "data": nested(5)}
    problem(api.post(f"/runs/{run.pk}/messages", {"payload": payload}), 422, "payload")
    assert not Message.objects.exists()


def test_malformed_json_is_a_clear_client_error(api, run):
    before = stored()
    response = api.post(f"/runs/{run.pk}/messages", raw=b'{"payload": {"text": ')
    assert response.status_code in (400, 422)
    problem(response, response.status_code, "body")
    assert stored() == before


# --- the OpenAPI document and the docs page --------------------------------------------------


def test_the_openapi_document_lists_every_endpoint(client):
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/json")
    document = response.json()
    assert document["openapi"].startswith("3.")
    assert {
        "/api/v1/sessions",
        "/api/v1/runs",
        "/api/v1/runs/{pk}",
        "/api/v1/runs/{pk}/finish",
        "/api/v1/runs/{pk}/messages",
        "/api/v1/runs/{pk}/checkpoints",
        "/api/v1/runs/{pk}/operations",
        "/api/v1/runs/{pk}/artifacts",
        "/api/v1/operations/{pk}",
        "/api/v1/operations/{pk}/claim",
        "/api/v1/operations/{pk}/intent",
        "/api/v1/operations/{pk}/report",
        "/api/v1/operations/{pk}/rollback",
        "/api/v1/artifacts/{sha256}",
    } <= set(document["paths"])
    assert document["components"]["securitySchemes"]["TokenAuth"] == {
        "type": "http",
        "scheme": "bearer",
    }
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            assert operation["security"] == [{"TokenAuth": []}], (method, path)
            assert {"401", "404", "422"} <= set(map(str, operation["responses"])), (method, path)


def test_the_docs_page_uses_only_local_files(client):
    response = client.get("/api/v1/docs")
    assert response.status_code == 200
    page = response.content.decode()
    assert "<html" in page
    sources = re.findall(r'<(?:script|link)[^>]*(?:src|href)="([^"]+)"', page)
    assert sources
    assert not [s for s in sources if re.match(r"(https?:)?//", s)]
    assert "https://" not in page and "http://" not in page
    for source in sources:
        assert source.startswith("/static/")
        assert finders.find(source.removeprefix("/static/")), source


def test_the_docs_are_public_but_the_api_is_not(run):
    client = Client()
    assert client.get("/api/v1/docs").status_code == 200
    assert client.get(f"/api/v1/runs/{run.pk}").status_code == 401


def test_api_calls_need_no_csrf_token(agent_token, run):
    api = Api(agent_token.plain, Client(enforce_csrf_checks=True))
    response = api.post(f"/runs/{run.pk}/messages", {"payload": {"text": "hi"}})
    assert response.status_code == 201
    assert Message.objects.get(run=run, seq=response.json()["seq"]).payload == {"text": "hi"}
