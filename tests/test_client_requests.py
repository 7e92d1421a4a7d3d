"""Human requests and the feed through the sync client, against a live server: the agent
asks, a reviewer answers (through the services, as the request page does), and the
agent reads the answer by waiting on it or from its feed."""

from datetime import timedelta
from itertools import islice

import pytest
from django.utils import timezone

from oversight_client import Cancelled, Expired, InvalidRequest, Rejected, WaitTimedOut
from runs.actors import Actor
from runs.models import HumanRequest, Run
from runs.services import requests as human_requests
from runs.services.runs import cancel_run
from tests.client_helpers import CLIENTS, NOTE, answering, client_for, deciding, drive

SCHEMA = {
    "type": "object",
    "properties": {"amount": {"type": "number", "maximum": 1000}},
    "required": ["amount"],
}

pytest_plugins = ["tests.client_helpers"]


@pytest.fixture
def run_id(ovs) -> int:
    session = ovs.open_session(title="Request tests", external_id="thread-1")
    return ovs.start_run(session["id"], goal="Pay the supplier", external_id="thread-1/run")["id"]


def request_row(asked: dict) -> HumanRequest:
    return HumanRequest.objects.get(pk=asked["id"])


def test_a_sign_off_is_asked_and_answered(ovs, run_id, reviewer):
    asked = ovs.ask(run_id, "Sign off the June plan?", context="**3 steps**", external_id="i-1")
    assert (asked["status"], asked["external_id"]) == ("open", "i-1")
    run = ovs.run(run_id)
    assert (run["status"], run["reason"]) == ("waiting", "needs_input")
    with answering(reviewer, "approve", comment="Go ahead"):
        answer = ovs.answer(asked["id"], timeout=20)
    assert (answer["kind"], answer["by"], answer["comment"]) == ("approve", "reviewer", "Go ahead")
    assert ovs.find_request("i-1")["status"] == "answered"
    assert ovs.run(run_id)["status"] != "waiting"


def test_a_choice_and_schema_data_come_back_as_data(ovs, run_id, reviewer):
    asked = ovs.ask(run_id, "Which account?", choices=["savings", "checking"])
    with answering(reviewer, "choose", data="savings"):
        assert ovs.answer(asked["id"], timeout=20)["data"] == "savings"
    asked = ovs.ask(run_id, "How much?", answer_schema=SCHEMA)
    with answering(reviewer, "answer", data={"amount": 250}):
        assert ovs.answer(asked["id"], timeout=20)["data"] == {"amount": 250}


@pytest.mark.parametrize("cls", CLIENTS)
def test_each_kind_is_asked_by_name_and_its_answer_says_which(
    live_server, client_token, run_id, reviewer, cls
):
    """#34: a question was asked as a sign-off, its answer a comment; now each of the
    four kinds is asked by name, and the answer names the kind and carries its data."""
    client = client_for(live_server, client_token, cls)
    asked = [
        ({"kind": "question"}, "answer", "Blue Heron"),
        ({"kind": "sign_off"}, "approve", None),
        ({"kind": "choice", "choices": ["a", "b"]}, "choose", "b"),
        ({"kind": "data", "answer_schema": SCHEMA}, "answer", {"amount": 250}),
    ]
    for fields, kind, data in asked:
        request = drive(client.ask(run_id, "Well?", **fields))
        assert request["kind"] == fields["kind"]
        with answering(reviewer, kind, data=data):
            answer = drive(client.answer(request["id"], timeout=20))
        assert (answer["request_kind"], answer["kind"], answer["data"]) == (
            fields["kind"],
            kind,
            data,
        )


def test_asking_without_a_kind_means_what_it_did_before(ovs, run_id):
    assert ovs.ask(run_id, "Sign off?")["kind"] == "sign_off"
    assert ovs.ask(run_id, "Which?", choices=["a", "b"])["kind"] == "choice"
    assert ovs.ask(run_id, "How much?", answer_schema=SCHEMA)["kind"] == "data"


def test_a_kind_its_fields_contradict_is_refused(ovs, run_id):
    with pytest.raises(InvalidRequest) as refused:
        ovs.ask(run_id, "Name it?", kind="question", answer_schema=SCHEMA)
    assert refused.value.detail.startswith("answer_schema: only data has an answer_schema")
    assert not HumanRequest.objects.exists()


def test_a_rejected_request_raises_rejected_with_the_reason(ovs, run_id, reviewer):
    asked = ovs.ask(run_id, "Sign off the June plan?")
    with (
        answering(reviewer, "reject", comment="Not before the audit"),
        pytest.raises(Rejected) as rejected,
    ):
        ovs.answer(asked["id"], timeout=20)
    assert rejected.value.reason == "Not before the audit"
    assert (rejected.value.request["id"], rejected.value.operation) == (asked["id"], None)


def test_an_expired_or_cancelled_request_raises(ovs, run_id, admin_user):
    asked = ovs.ask(run_id, "Anyone?")
    human_requests.expire_if_due(request_row(asked), timezone.now() + timedelta(days=60))
    with pytest.raises(Expired):
        ovs.answer(asked["id"], timeout=5)
    asked = ovs.ask(run_id, "Still there?")
    cancel_run(run=Run.objects.get(pk=run_id), actor=Actor.of_user(admin_user), reason="stop")
    with pytest.raises(Cancelled) as cancelled:
        ovs.answer(asked["id"], timeout=5)
    assert cancelled.value.request["status"] == "cancelled"


def test_an_answer_nobody_gives_in_time_is_withdrawn(ovs, run_id):
    asked = ovs.ask(run_id, "Sign off?")
    with pytest.raises(WaitTimedOut) as timed_out:
        ovs.answer(asked["id"], timeout=1)
    assert timed_out.value.request["status"] == "cancelled"
    assert request_row(asked).status == "cancelled"
    run = ovs.run(run_id)
    assert run["reason"] != "needs_input"


def test_the_feed_lists_decisions_and_answers_in_order(ovs, run_id, reviewer):
    op = ovs.propose(run_id, "note-1", arguments={"line": "paid"}, **NOTE)
    with deciding(reviewer, "note-1"):
        ovs.wait(op["id"], timeout=20)
    asked = ovs.ask(run_id, "Which account?", choices=["a", "b"], external_id="q-1")
    with answering(reviewer, "choose", data="b"):
        ovs.answer(asked["id"], timeout=20)

    page = ovs.events_page(after=0)
    events = page["events"]
    seqs = [event["seq"] for event in events]
    assert seqs == list(range(1, len(events) + 1)) and page["cursor"] == len(events)
    approved = [e for e in events if e["call_id"] == "note-1" and e["to_status"] == "approved"]
    answered = [e for e in events if e["request"] == asked["id"] and e["to_status"] == "answered"]
    assert len(approved) == len(answered) == 1
    assert approved[0]["seq"] < answered[0]["seq"]
    assert answered[0]["request_external_id"] == "q-1"
    assert answered[0]["run_external_id"] == "thread-1/run"
    # The iterator resumes from a cursor: it lists only what came after it, in order.
    later = [e for e in events if e["seq"] > approved[0]["seq"]]
    assert list(islice(ovs.events(after=approved[0]["seq"], wait=1), len(later))) == later


def test_the_feed_iterator_waits_for_the_next_event(ovs, run_id, reviewer):
    cursor = ovs.events_page()["cursor"]
    asked = ovs.ask(run_id, "Sign off?")
    with answering(reviewer, "approve"):
        for event in ovs.events(after=cursor + 1, wait=5):
            if event["request"] == asked["id"] and event["to_status"] == "answered":
                break
    assert event["actor"] == "reviewer"
