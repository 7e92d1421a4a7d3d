"""Messages and the run's life around them: seq, payload validation, waiting for input,
finishing and retrying."""

import pytest

from runs.actors import Actor
from runs.errors import InvalidInput, RunNotAccepting
from runs.models import Checkpoint, Message, Operation, Run
from runs.payloads import MessageKind
from runs.services.runs import append_message, finish_run, request_input, start_run
from tests.conftest import AGENT
from tests.helpers import refused, steps_since


def say(run: Run, text: str = "hello", actor: Actor = AGENT, **kwargs) -> Message:
    kind = MessageKind.USER if actor.user else MessageKind.AGENT
    kwargs.setdefault("payload", {"text": text})
    return append_message(run=run, kind=kind, actor=actor, **kwargs)


def refreshed(run: Run) -> Run:
    run.refresh_from_db()
    return run


@pytest.fixture
def queued_run(run, owner) -> Run:
    """A run whose wait for input ended: back in the queue for the agent."""
    request_input(run=run, question="Which account?", actor=AGENT)
    say(refreshed(run), "Account C", Actor.of_user(owner))
    return refreshed(run)


def test_seq_counts_up_per_run(run, session):
    other = start_run(session=session, goal="Another goal", actor=AGENT)

    assert [say(run).seq for _ in range(3)] == [1, 2, 3]
    assert say(other).seq == 1
    assert say(run).seq == 4


@pytest.mark.parametrize(
    ("payload", "schema_version"),
    [
        ({}, 1),
        ({"text": "hi", "extra": 1}, 1),
        ({"text": 5}, 1),
        ({"text": "hi", "data": "not an object"}, 1),
        ("hi", 1),
        ({"text": "hi"}, 2),
    ],
    ids=["missing-text", "extra-key", "text-not-str", "data-not-object", "not-object", "v2"],
)
def test_invalid_payload_is_refused_before_save(queued_run, payload, schema_version):
    with refused(InvalidInput):
        say(queued_run, payload=payload, schema_version=schema_version)


def test_agent_message_resumes_a_queued_run(queued_run):
    before = queued_run.version

    say(queued_run)

    assert refreshed(queued_run).status == Run.Status.RUNNING
    assert steps_since(queued_run, before) == [("run.status", "queued", "running")]


def test_request_input_waits_until_the_owner_replies(run, owner):
    before = run.version

    question = request_input(run=run, question="Which account?", actor=AGENT)

    assert (question.seq, question.kind, question.payload) == (
        1,
        MessageKind.AGENT,
        {"text": "Which account?"},
    )
    assert steps_since(run, before) == [("run.status", "running", "waiting")]
    refreshed(run)
    assert (run.status, run.reason) == (Run.Status.WAITING, Run.Reason.NEEDS_INPUT)
    assert run.unblock.strip()

    say(run, "still thinking")  # The agent talking does not end its own wait.
    assert refreshed(run).status == Run.Status.WAITING

    say(run, "Account C", Actor.of_user(owner))

    assert steps_since(run, before + 1) == [("run.status", "waiting", "queued")]
    assert (refreshed(run).status, run.reason) == (Run.Status.QUEUED, "")


@pytest.mark.parametrize("status", [Run.Status.COMPLETED, Run.Status.PARTIAL, Run.Status.FAILED])
def test_finish_run_ends_it_with_its_outcome(run, status):
    before = run.version

    finished = finish_run(run=run, status=status, actor=AGENT, outcome="paid 2 of 3")

    assert (finished.status, finished.outcome) == (status, "paid 2 of 3")
    assert steps_since(run, before) == [("run.status", "running", status)]


@pytest.mark.parametrize("status", [Run.Status.PARTIAL, Run.Status.FAILED])
def test_partial_or_failed_finish_needs_an_outcome(run, status):
    with refused(InvalidInput):
        finish_run(run=run, status=status, actor=AGENT, outcome=" ")


def test_finish_run_cancels_operations_nobody_acted_on(run, propose):
    op = propose()
    before = refreshed(run).version

    finish_run(run=run, status=Run.Status.COMPLETED, actor=AGENT)

    op.refresh_from_db()
    assert op.status == Operation.Status.CANCELLED
    assert op.status_reason == "run finished completed"
    assert refreshed(run).status == Run.Status.COMPLETED
    assert steps_since(run, before) == [
        ("operation.status", "proposed", "cancelled"),
        ("run.status", "waiting", "queued"),
        ("run.status", "queued", "running"),
        ("run.status", "running", "completed"),
    ]


def test_finish_run_waits_for_an_operation_in_flight(run, propose):
    op = propose()
    Operation.objects.filter(pk=op.pk).update(status=Operation.Status.IN_FLIGHT)

    with refused(RunNotAccepting):
        finish_run(run=run, status=Run.Status.COMPLETED, actor=AGENT)


def test_retry_of_a_failed_run_is_a_new_run_pointing_at_it(run, session):
    finish_run(run=run, status=Run.Status.FAILED, actor=AGENT, outcome="bank timeout")

    retry = start_run(session=session, goal=run.goal, actor=AGENT, retry_of=run)

    assert retry.pk != run.pk
    assert retry.retry_of == run
    assert retry.status == Run.Status.RUNNING
    assert refreshed(run).status == Run.Status.FAILED
    created = Checkpoint.objects.get(run=retry, seq=1)
    assert (created.event, created.reason) == ("run.created", f"retry of run {run.pk}")


def test_retry_of_a_run_still_going_is_refused(run, session):
    with refused(InvalidInput):
        start_run(session=session, goal=run.goal, actor=AGENT, retry_of=run)
