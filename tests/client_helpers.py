"""Shared by the client tests (tests/test_client*.py, as ``pytest_plugins``): an agent
token, a client for the live server and a run of its own, and reviewers who decide or
answer from another thread while the test's client waits."""

import asyncio
import inspect
import threading
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection

from oversight_client import AsyncOversight, Oversight
from runs.actors import Actor
from runs.models import AgentToken, Decision, HumanRequest, Operation, Run
from runs.services import requests as human_requests
from runs.services.runs import cancel_run
from tests.helpers import decide_on
from tests.processes import wait_until

OPEN = ["queued", "running", "waiting"]
NOTE = {"action": "notes.append", "rollback_kind": "in_band"}
QUICK = {"timeout": 10, "retries": 3, "backoff": 0.01}
READING_SECONDS = 60  # How long a reviewer looks for what to act on.
CLIENTS = [Oversight, AsyncOversight]


def drive(result: Any) -> Any:
    """What a client method answered: the sync client's value, the async one's awaited."""
    return asyncio.run(result) if inspect.iscoroutine(result) else result


def client_for(live_server, token: str, cls: type = Oversight, **options: Any):
    """A client of ``cls`` for the live server that gives up quickly on a dead one."""
    return cls(live_server.url, token, **{**QUICK, **options})


@pytest.fixture
def client_token(project, owner) -> str:
    """The plain text of an agent token of the project, acting for its owner."""
    return AgentToken.issue(project=project, name="client-tests", owner=owner)[1]


@pytest.fixture
def ovs(live_server, client_token) -> Oversight:
    return client_for(live_server, client_token)


@pytest.fixture
def aovs(live_server, client_token) -> AsyncOversight:
    return client_for(live_server, client_token, AsyncOversight)


@pytest.fixture
def run_id(ovs) -> int:
    session = ovs.open_session(title="Client tests")
    return ovs.start_run(session["id"], goal="Keep the notes")["id"]


@contextmanager
def reviewing(find: Callable[[], Any], act: Callable[[Any], None], what: str):
    """A reviewer in another thread: once ``find()`` returns something, ``act`` on it,
    while the block waits for the outcome through the API. If that fails, the runs left
    open are cancelled so that the waiting client stops waiting."""
    errors: list[BaseException] = []

    def act_when_found() -> None:
        try:
            act(wait_until(find, READING_SECONDS, what))
        except BaseException as exc:
            errors.append(exc)
            for run in Run.objects.filter(status__in=OPEN):
                cancel_run(run=run, actor=Actor.agent("test"), reason=f"review failed: {exc}")
        finally:
            connection.close()

    thread = threading.Thread(target=act_when_found, daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join(timeout=READING_SECONDS + 30)
    assert not errors, errors


def deciding(reviewer, call_id: str, kind: str = Decision.Kind.APPROVE, then=None, **decision):
    """Decide on ``call_id`` once it is proposed (then call ``then``)."""

    def act(op: Operation) -> None:
        decide_on(op, reviewer, kind, **decision)
        if then is not None:
            then()

    proposed = Operation.objects.filter(call_id=call_id, status="proposed")
    return reviewing(proposed.first, act, f"operation {call_id}")


def answering(reviewer, kind: str, **answer):
    """Answer the open human request once there is one."""

    def act(request: HumanRequest) -> None:
        human_requests.answer(
            request=request, reviewer=reviewer, kind=kind, version=request.version, **answer
        )

    waiting = HumanRequest.objects.filter(status="open")
    return reviewing(waiting.first, act, "a human request")
