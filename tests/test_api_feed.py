"""The feed of a token's events (``GET /events``): every checkpoint of its runs, in the
order they committed, from a cursor that means the same thing on every read."""

import threading
import time

import pytest
from django.db import connection, connections

from runs.models import Checkpoint, Operation
from tests.api_helpers import Api, agent_proposal, problem
from tests.helpers import decide_on

pytest_plugins = ["tests.api_helpers"]


def started(api: Api, external_id: str = "") -> int:
    session = api.post("/sessions", {}).json()["id"]
    body = {"session": session, "goal": "work", "external_id": external_id}
    return api.post("/runs", body).json()["id"]


def feed(api: Api, **query) -> dict:
    response = api.get("/events", query)
    assert response.status_code == 200, response.content
    return response.json()


def test_the_feed_lists_every_checkpoint_of_the_tokens_runs_in_order(api, reviewer):
    first, second = started(api, "thread-a"), started(api)
    op = api.propose(first, agent_proposal(external_id="interrupt-1")).json()
    decide_on(Operation.objects.get(pk=op["id"]), reviewer, kind="reject", comment="not now")
    events = feed(api)["events"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    checkpoints = Checkpoint.objects.filter(run__in=[first, second]).order_by("pk")
    assert [(e["run"], e["event"]) for e in events] == [(c.run_id, c.event) for c in checkpoints]
    rejected = events[-2]
    assert {k: rejected[k] for k in ("run", "run_external_id", "operation", "call_id")} == {
        "run": first,
        "run_external_id": "thread-a",
        "operation": op["id"],
        "call_id": "push-1",
    }
    assert (rejected["operation_external_id"], rejected["to_status"], rejected["actor"]) == (
        "interrupt-1",
        "rejected",
        "reviewer",
    )
    assert (rejected["request"], rejected["request_external_id"]) == (None, None)


def test_the_cursor_pages_through_the_feed_and_then_waits_at_its_end(api):
    started(api)  # Two checkpoints: created, running.
    page = feed(api, limit=1)
    assert ([e["seq"] for e in page["events"]], page["cursor"]) == ([1], 1)
    page = feed(api, after=page["cursor"])
    assert ([e["seq"] for e in page["events"]], page["cursor"]) == ([2], 2)
    assert feed(api, after=2) == {"events": [], "cursor": 2}


def test_another_tokens_events_are_not_in_the_feed(api, other_api):
    started(other_api)
    assert feed(api) == {"events": [], "cursor": 0}
    started(api)
    assert len(feed(api)["events"]) == 2 and len(feed(other_api)["events"]) == 2


@pytest.mark.parametrize(
    ("query", "field"),
    [({"limit": 0}, "limit"), ({"after": -1}, "after"), ({"wait": -1}, "wait")],
)
def test_a_bad_cursor_limit_or_wait_is_refused(api, query, field):
    problem(api.get("/events", query), 422, field)


@pytest.mark.django_db(transaction=True)
def test_a_waiting_read_answers_as_soon_as_an_event_commits(api, reviewer):
    run = started(api)
    op = api.propose(run, agent_proposal()).json()
    cursor = feed(api)["cursor"]

    def decide_later() -> None:
        try:
            decide_on(Operation.objects.get(pk=op["id"]), reviewer)
        finally:
            connections.close_all()  # This thread's own connection.

    timer = threading.Timer(0.5, decide_later)
    timer.start()
    began = time.monotonic()
    page = feed(api, after=cursor, wait=10)
    timer.join()
    assert time.monotonic() - began < 5
    assert page["events"][0]["operation"] == op["id"]
    assert page["events"][0]["seq"] == cursor + 1


def test_a_human_requests_events_name_it(api):
    run = started(api)
    asked = api.post(f"/runs/{run}/requests", {"prompt": "Ship?", "external_id": "ask-1"})
    assert asked.status_code == 201, asked.content
    api.post(f"/requests/{asked.json()['id']}/withdraw", {"reason": "not needed"})
    events = [e for e in feed(api)["events"] if e["request"] is not None]
    assert [(e["event"], e["to_status"], e["request_external_id"]) for e in events] == [
        ("request.created", "open", "ask-1"),
        ("request.status", "cancelled", "ask-1"),
    ]
    assert {(e["operation"], e["call_id"], e["operation_external_id"]) for e in events} == {
        (None, None, None)
    }


def test_a_page_of_the_feed_costs_the_same_queries_whatever_its_length(
    api, reviewer, django_assert_num_queries
):
    run = started(api)
    # The token, whether any entry waits for its number, and then the page. On
    # PostgreSQL the read numbers what committed since the last one: the counter, its
    # entries, their numbers and the counter's new value (in a savepoint here, since
    # the test runs in a transaction); SQLite's writers number their own.
    numbering = 6 if connection.vendor == "postgresql" else 0
    with django_assert_num_queries(3 + numbering):
        assert len(feed(api)["events"]) == 2
    with django_assert_num_queries(3):
        assert len(feed(api)["events"]) == 2
    for n in range(3):
        op = api.propose(run, agent_proposal(f"c{n}")).json()
        decide_on(Operation.objects.get(pk=op["id"]), reviewer)
    with django_assert_num_queries(3 + numbering):
        assert len(feed(api)["events"]) > 10
    with django_assert_num_queries(3):
        assert len(feed(api)["events"]) > 10
