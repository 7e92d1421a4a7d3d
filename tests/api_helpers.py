"""Fixtures and a small client for the agent API tests.

Test modules load the fixtures with ``pytest_plugins = ["tests.api_helpers"]``. The
module is imported before pytest sees that line, so it opts out of assertion
rewriting (PYTEST_DONT_REWRITE) instead of warning; its asserts carry their own
messages.
"""

import base64
import hashlib
import json
from typing import Any

import pytest
from django.test import Client

from runs.models import Operation
from runs.services.runs import open_session, start_run
from tests.conftest import AGENT, issued
from tests.helpers import decide_on, drained

PREFIX = "/api/v1"


class Api:
    """Talks to the agent API as an agent would: a bearer token, JSON in and out."""

    def __init__(self, token: str | None, client: Client | None = None) -> None:
        self.token = token
        self.client = client or Client()

    def headers(self, key: str | None = None, **extra: str) -> dict[str, str]:
        headers = dict(extra)
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        if key is not None:
            headers["Idempotency-Key"] = key
        return headers

    def get(self, path: str, params: dict | None = None, **extra: str):
        return self.client.get(PREFIX + path, params or {}, headers=self.headers(**extra))

    def post(
        self, path: str, body: Any = None, *, key: str | None = None, raw: bytes | None = None
    ):
        data = raw if raw is not None else json.dumps({} if body is None else body)
        return self.client.post(
            PREFIX + path, data, content_type="application/json", headers=self.headers(key)
        )

    # Shortcuts for the usual steps of an agent's work.

    def run_version(self, run_id: int) -> int:
        return self.get(f"/runs/{run_id}").json()["version"]

    def propose(self, run_id: int, body: dict | None = None, *, key: str | None = None):
        """Propose ``body`` (default: a ledger transfer), based on the run's current
        version unless the body says otherwise."""
        body = dict(body or proposal())
        body.setdefault("base_version", self.run_version(run_id))
        return self.post(f"/runs/{run_id}/operations", body, key=key)


def proposal(call_id: str = "call-1", **fields) -> dict:
    """A proposal body (without ``base_version`` unless given): by default a registered
    action, a ledger transfer."""
    return {
        "call_id": call_id,
        "action": "ledger.transfer",
        "arguments": {"from": "A", "to": "B", "amount": "100.00"},
        "risk": "medium",
        "rollback_kind": "compensating",
        **fields,
    }


def agent_proposal(call_id: str = "push-1", **fields) -> dict:
    """A proposal of an action Oversight does not know: the agent executes it."""
    defaults = {
        "action": "git.push",
        "arguments": {"remote": "origin", "branch": "main"},
        "rollback_kind": "none",
    }
    return proposal(call_id, **{**defaults, **fields})


def artifact_body(content: bytes, name: str = "report.txt", **fields) -> dict:
    return {
        "name": name,
        "media_type": "text/plain",
        "content_base64": base64.b64encode(content).decode(),
        "sha256": hashlib.sha256(content).hexdigest(),
        **fields,
    }


def problem(response, status: int, field: str | None = None) -> dict:
    """Assert ``response`` is a problem body of ``status`` (naming ``field`` if given)."""
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error", "detail", "field", "request_id"}
    assert body["detail"]
    assert body["request_id"] == response["X-Request-ID"]
    if field is not None:
        assert body["field"] == field, body
    return body


def nested(levels: int) -> dict:
    """A JSON object nested ``levels`` deep."""
    value: dict = {}
    for _ in range(levels - 1):
        value = {"x": value}
    return value


@pytest.fixture
def api(agent_token) -> Api:
    return Api(agent_token.plain)


@pytest.fixture
def other_token(other_project, outsider):
    return issued(other_project, "other-agent", outsider)


@pytest.fixture
def other_api(other_token) -> Api:
    return Api(other_token.plain)


@pytest.fixture
def other_run(other_project, outsider, other_token):
    """A run of the other project, which ``api``'s token must never reach."""
    session = open_session(
        project=other_project, owner=outsider, agent="other-agent", token=other_token
    )
    return start_run(session=session, goal="Someone else's work", actor=AGENT)


def calls(run: int, op: int, session: int, sha: str) -> dict[str, tuple[str, str, dict | None]]:
    """One valid request to every endpoint but opening a session, by name: (method,
    path, body), aimed at the given run, operation, session and artifact."""
    return {
        "start run": ("post", "/runs", {"session": session, "goal": "Try again"}),
        "read run": ("get", f"/runs/{run}", None),
        "finish run": ("post", f"/runs/{run}/finish", {"status": "completed"}),
        "append message": ("post", f"/runs/{run}/messages", {"payload": {"text": "hello"}}),
        "list checkpoints": ("get", f"/runs/{run}/checkpoints", None),
        "propose": (
            "post",
            f"/runs/{run}/operations",
            agent_proposal("new-call", base_version=0),
        ),
        "read operation": ("get", f"/operations/{op}", None),
        "claim": ("post", f"/operations/{op}/claim", {}),
        "intent": ("post", f"/operations/{op}/intent", {"epoch": 1}),
        "report": ("post", f"/operations/{op}/report", {"epoch": 1, "verified": True}),
        "rollback": ("post", f"/operations/{op}/rollback", {"epoch": 1, "outcome": "compensated"}),
        "upload artifact": ("post", f"/runs/{run}/artifacts", artifact_body(b"notes")),
        "fetch artifact": ("get", f"/artifacts/{sha}", None),
    }


CALLS = list(calls(0, 0, 0, "0" * 64))


def send(api: Api, method: str, path: str, body: dict | None):
    return api.get(path) if method == "get" else api.post(path, body)


class ServerAgent:
    """An agent of one project whose proposals of Oversight's own actions its
    ``reviewer`` approves and a worker executes: a run of its own, opened through the
    API with its token."""

    def __init__(self, api: Api, reviewer) -> None:
        self.api, self.reviewer = api, reviewer
        session = api.post("/sessions", {"title": "Server actions"}).json()["id"]
        self.run = api.post("/runs", {"session": session, "goal": "Do the work"}).json()["id"]

    def executed(self, call_id: str, action: str, arguments: dict, rollback_kind: str) -> dict:
        """Propose, have it approved and executed; the operation as the agent reads it."""
        body = {
            "call_id": call_id,
            "action": action,
            "arguments": arguments,
            "risk": "low",
            "rollback_kind": rollback_kind,
        }
        response = self.api.propose(self.run, body)
        assert response.status_code == 201, response.content
        op = Operation.objects.get(pk=response.json()["id"])
        decide_on(op, self.reviewer)
        drained(op)
        return self.api.get(f"/operations/{op.pk}").json()
