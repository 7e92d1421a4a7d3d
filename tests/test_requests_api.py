"""Human requests through the agent API (#12): asking, reading (and long-polling) the
answer, looking a request up by the agent's own name for it, withdrawing it."""

import threading
import time

import pytest
from django.db import connection

from runs.models import HumanRequest
from runs.services import requests as service
from runs.services.runs import cancel_run, open_session, start_run
from tests.api_helpers import Api, problem
from tests.conftest import AGENT, issued
from tests.test_api_waits import LONGEST_WAIT, until_long_polls_wait

pytest_plugins = ["tests.api_helpers"]

QUESTION = {
    "prompt": "Which region should the cluster go to?",
    "context": "Latency **matters** more than cost.",
    "choices": ["eu-west", "us-east"],
    "external_id": "thread-7/interrupt-1",
}


def answered(pk: int, reviewer, kind: str = "choose", **fields) -> HumanRequest:
    request = HumanRequest.objects.get(pk=pk)
    fields.setdefault("data", "us-east" if kind == "choose" else None)
    return service.answer(
        request=request, reviewer=reviewer, kind=kind, version=request.version, **fields
    )


def test_asking_answers_201_and_the_run_waits(api, run):
    response = api.post(f"/runs/{run.pk}/requests", QUESTION)

    assert response.status_code == 201, response.content
    body = response.json()
    request = HumanRequest.objects.get(pk=body["id"])
    assert body == {
        "id": request.pk,
        "run": run.pk,
        "external_id": "thread-7/interrupt-1",
        "prompt": QUESTION["prompt"],
        "kind": "choice",
        "context": QUESTION["context"],
        "answer_schema": None,
        "choices": ["eu-west", "us-east"],
        "status": "open",
        "answer": None,
        "version": 1,
        "expires_at": body["expires_at"],
        "created_at": body["created_at"],
        "run_version": api.run_version(run.pk),
    }
    read = api.get(f"/runs/{run.pk}").json()
    assert (read["status"], read["reason"], read["unblock"]) == (
        "waiting",
        "needs_input",
        f"an answer to request {request.pk}",
    )


def test_asking_again_by_external_id_answers_200_with_the_same_request(api, run):
    first = api.post(f"/runs/{run.pk}/requests", QUESTION).json()
    again = api.post(f"/runs/{run.pk}/requests", QUESTION)
    assert again.status_code == 200
    assert again.json()["id"] == first["id"]
    assert HumanRequest.objects.count() == 1


def test_the_same_external_id_asking_something_else_is_409(api, run):
    api.post(f"/runs/{run.pk}/requests", QUESTION)
    body = problem(api.post(f"/runs/{run.pk}/requests", {**QUESTION, "prompt": "Else?"}), 409)
    assert body["error"] == "external_id_conflict"


def test_another_tokens_external_id_is_its_own_and_says_nothing_of_the_first(
    api, run, project, owner
):
    mine = api.post(f"/runs/{run.pk}/requests", QUESTION).json()
    other = issued(project, "second-agent", owner)
    session = open_session(project=project, owner=owner, agent="second", token=other)
    theirs = start_run(session=session, goal="Other work", actor=AGENT)

    answer = Api(other.plain).post(f"/runs/{theirs.pk}/requests", QUESTION)

    assert answer.status_code == 201
    assert answer.json()["id"] != mine["id"]
    assert answer.json()["run"] == theirs.pk


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "prompt"),
        ({"prompt": ""}, "prompt"),
        ({"prompt": "Ok?", "choices": ["a"], "answer_schema": {"type": "string"}}, "choices"),
        ({"prompt": "Ok?", "answer_schema": {"type": "nonsense"}}, "answer_schema"),
        ({"prompt": "Ok?", "choices": ["a", "a"]}, "choices"),
        ({"prompt": "Ok?", "choices": []}, "choices"),
        ({"prompt": "Ok?", "expires_in": 10}, "expires_in"),
        ({"prompt": "Ok?", "context": "x" * 20_001}, "context"),
    ],
)
def test_a_malformed_request_is_422_naming_the_field(api, run, body, field):
    problem(api.post(f"/runs/{run.pk}/requests", body), 422, field)
    assert not HumanRequest.objects.exists()


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        ({"prompt": "Ok?"}, "sign_off"),
        ({"prompt": "Ok?", "choices": ["a", "b"]}, "choice"),
        ({"prompt": "Ok?", "answer_schema": {"type": "integer"}}, "data"),
        ({"prompt": "Ok?", "kind": "question"}, "question"),
        ({"prompt": "Ok?", "kind": "sign_off"}, "sign_off"),
    ],
)
def test_a_request_is_of_the_kind_asked_or_else_what_it_was_before_kinds(api, run, body, kind):
    response = api.post(f"/runs/{run.pk}/requests", body)
    assert response.status_code == 201, response.content
    assert response.json()["kind"] == kind
    assert HumanRequest.objects.get().kind == kind


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"prompt": "Ok?", "kind": "choice"}, "choices"),
        ({"prompt": "Ok?", "kind": "data"}, "answer_schema"),
        ({"prompt": "Ok?", "kind": "question", "choices": ["a", "b"]}, "choices"),
        (
            {"prompt": "Ok?", "kind": "question", "answer_schema": {"type": "string"}},
            "answer_schema",
        ),
        ({"prompt": "Ok?", "kind": "sign_off", "answer_schema": {}}, "answer_schema"),
        (
            {"prompt": "Ok?", "kind": "choice", "choices": ["a"], "answer_schema": {}},
            "answer_schema",
        ),
        ({"prompt": "Ok?", "kind": "poll"}, "kind"),
        ({"prompt": "Ok?", "kind": None, "choices": ["a"], "answer_schema": {}}, "choices"),
    ],
)
def test_a_kind_its_fields_contradict_is_422_naming_the_field(api, run, body, field):
    body = problem(api.post(f"/runs/{run.pk}/requests", body), 422, field)
    assert body["detail"].startswith(f"{field}:") or field == "kind"
    assert not HumanRequest.objects.exists()


def test_the_agent_reads_a_questions_answer_as_text(api, run, reviewer):
    asked = api.post(f"/runs/{run.pk}/requests", {"prompt": "Name it?", "kind": "question"})
    pk = asked.json()["id"]
    answered(pk, reviewer, "answer", data="Blue Heron")

    answer = api.get(f"/requests/{pk}").json()["answer"]

    assert (answer["request_kind"], answer["kind"], answer["data"], answer["comment"]) == (
        "question",
        "answer",
        "Blue Heron",
        "",
    )


def test_a_closed_run_answers_409_run_closed(api, run):
    cancel_run(run=run, actor=AGENT, reason="Stop")
    body = problem(api.post(f"/runs/{run.pk}/requests", {"prompt": "Ok?"}), 409)
    assert body["error"] == "run_closed"


def test_another_tokens_run_and_request_are_not_found(api, other_api, other_run, run):
    problem(other_api.post(f"/runs/{run.pk}/requests", {"prompt": "Mine?"}), 404)
    pk = api.post(f"/runs/{run.pk}/requests", QUESTION).json()["id"]
    problem(other_api.get(f"/requests/{pk}"), 404)
    problem(other_api.post(f"/requests/{pk}/withdraw", {}), 404)
    assert other_api.get("/requests", {"external_id": QUESTION["external_id"]}).json() == []


def test_the_agent_reads_the_answer_with_who_and_when(api, run, reviewer):
    pk = api.post(f"/runs/{run.pk}/requests", QUESTION).json()["id"]
    answered(pk, reviewer, comment="Closer to the users")

    body = api.get(f"/requests/{pk}").json()

    assert body["status"] == "answered"
    assert body["version"] == 2
    answer = body["answer"]
    assert (answer["kind"], answer["by"], answer["comment"], answer["data"]) == (
        "choose",
        "reviewer",
        "Closer to the users",
        "us-east",
    )
    assert answer["at"]
    assert api.get(f"/runs/{run.pk}").json()["status"] == "queued"


def test_an_overdue_request_reads_as_expired(api, run):
    pk = api.post(f"/runs/{run.pk}/requests", {"prompt": "Ok?", "expires_in": 60}).json()["id"]
    HumanRequest.objects.filter(pk=pk).update(expires_at="2000-01-01T00:00:00Z")
    body = api.get(f"/requests/{pk}").json()
    assert (body["status"], body["answer"]) == ("expired", None)


def test_lookups_by_external_id_and_by_run(api, run, reviewer):
    first = api.post(f"/runs/{run.pk}/requests", QUESTION).json()["id"]
    second = api.post(f"/runs/{run.pk}/requests", {"prompt": "Sign off the plan?"}).json()["id"]
    answered(first, reviewer)

    by_name = api.get("/requests", {"external_id": QUESTION["external_id"]}).json()
    assert [r["id"] for r in by_name] == [first]
    assert api.get("/requests", {"external_id": "unknown"}).json() == []
    assert [r["id"] for r in api.get("/requests", {"run": run.pk}).json()] == [first, second]
    opened = api.get("/requests", {"run": run.pk, "status": "open"}).json()
    assert [r["id"] for r in opened] == [second]


@pytest.mark.parametrize(
    "query",
    [{}, {"status": "open"}, {"external_id": "x", "run": 1}, {"run": 1, "status": "nonsense"}],
)
def test_a_lookup_without_one_filter_is_422(api, query):
    problem(api.get("/requests", query), 422)


def test_the_agent_withdraws_its_request(api, run):
    pk = api.post(f"/runs/{run.pk}/requests", QUESTION).json()["id"]

    response = api.post(f"/requests/{pk}/withdraw", {"reason": "Decided myself"})

    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    assert api.get(f"/runs/{run.pk}").json()["status"] == "queued"
    assert api.post(f"/requests/{pk}/withdraw", {}).json()["status"] == "cancelled"


def test_an_answered_request_cannot_be_withdrawn(api, run, reviewer):
    pk = api.post(f"/runs/{run.pk}/requests", QUESTION).json()["id"]
    answered(pk, reviewer)
    body = problem(api.post(f"/requests/{pk}/withdraw", {}), 409)
    assert "answered" in body["detail"].lower()


def test_a_wait_from_an_older_version_answers_at_once(api, run, reviewer):
    pk = api.post(f"/runs/{run.pk}/requests", QUESTION).json()["id"]
    answered(pk, reviewer)
    started = time.monotonic()
    response = api.get(f"/requests/{pk}", {"wait": LONGEST_WAIT, "version": 1})
    assert time.monotonic() - started < LONGEST_WAIT, "it waited"
    assert response.json()["status"] == "answered"


def test_a_wait_out_of_bounds_is_refused(api, run):
    pk = api.post(f"/runs/{run.pk}/requests", QUESTION).json()["id"]
    problem(api.get(f"/requests/{pk}", {"wait": 31}), 422, "wait")


@pytest.mark.django_db(transaction=True)
def test_a_long_poll_wakes_at_the_answer(api, run, reviewer):
    """The reviewer answers once the poll waits; the poll answers with the answer before
    its wait is out."""
    pk = api.post(f"/runs/{run.pk}/requests", QUESTION).json()["id"]
    done = []

    def review() -> None:
        try:
            until_long_polls_wait(1)
            answered(pk, reviewer, "reject", comment="Neither: wait for the audit")
            done.append(pk)
        finally:
            connection.close()

    reviewer_thread = threading.Thread(target=review)
    reviewer_thread.start()
    try:
        started = time.monotonic()
        response = api.get(f"/requests/{pk}", {"wait": LONGEST_WAIT})
        waited = time.monotonic() - started
    finally:
        reviewer_thread.join(timeout=90)
    assert done == [pk], "the reviewer's answer failed"
    assert waited < LONGEST_WAIT, "the answer did not end the wait"
    body = response.json()
    assert (body["status"], body["answer"]["kind"]) == ("rejected", "reject")
    assert body["answer"]["comment"] == "Neither: wait for the audit"
