"""The sync client's agent-side additions against a live server: external ids and
lookups, idempotency keys on creates, messages read back, the action catalogue, proposals
with their why, one output for every executor, and waits that fail closed."""

import logging
from datetime import timedelta

import pytest

from oversight_client import Conflict, Failed, Observed, WaitTimedOut
from runs.actions.files import workspace_of
from runs.actors import Actor
from runs.engine.claims import claim_next
from runs.engine.worker import Worker
from runs.models import Message, Operation, Run, Session
from runs.transitions import transition_operation
from tests.client_helpers import NOTE, client_for, deciding, reviewing
from tests.helpers import decide_on
from tests.processes import leases_lapsed

WRITE = {"path": "notes/today.md", "content": "hello\n", "expected_sha256": None}

pytest_plugins = ["tests.client_helpers"]


def test_a_thread_id_opens_one_session_and_one_run(ovs):
    first = ovs.open_session(title="Support", external_id="thread-7")
    again = ovs.open_session(title="Support", external_id="thread-7")
    assert again["id"] == first["id"] and first["external_id"] == "thread-7"
    run = ovs.start_run(first["id"], goal="Answer the customer", external_id="thread-7/1")
    assert ovs.start_run(first["id"], "Answer the customer", external_id="thread-7/1") == run
    assert ovs.find_session("thread-7")["id"] == first["id"]
    assert ovs.find_run("thread-7/1")["id"] == run["id"]
    assert (ovs.find_session("thread-8"), ovs.find_run("nope")) == (None, None)
    assert (Session.objects.count(), Run.objects.count()) == (1, 1)


def test_an_external_id_naming_something_else_is_a_conflict(ovs):
    ovs.open_session(title="Support", external_id="thread-7")
    with pytest.raises(Conflict) as conflict:
        ovs.open_session(title="Sales", external_id="thread-7")
    assert (conflict.value.status, conflict.value.code) == (409, "external_id_conflict")
    assert Session.objects.count() == 1


def test_operations_are_found_by_external_id_and_by_call_id(ovs, run_id):
    op = ovs.propose(run_id, "call-1", arguments={"line": "x"}, external_id="interrupt-3", **NOTE)
    assert ovs.find_operation(external_id="interrupt-3")["id"] == op["id"]
    assert ovs.find_operation(run_id=run_id, call_id="call-1")["id"] == op["id"]
    assert ovs.find_operation(run_id=run_id, call_id="call-2") is None
    with pytest.raises(TypeError):
        ovs.find_operation(run_id=run_id)


def test_a_create_repeated_with_its_idempotency_key_happens_once(ovs, run_id):
    """A process that restarts and repeats its create under the same key (say, derived
    from its thread and step) gets the first answer, not a second object."""
    first = ovs.message(run_id, "Looking at the invoice", idempotency_key="thread-7:step-1")
    again = ovs.message(run_id, "Looking at the invoice", idempotency_key="thread-7:step-1")
    assert first == again == 1
    assert Message.objects.filter(run_id=run_id).count() == 1
    session = ovs.open_session(title="Once", idempotency_key="open:thread-9")
    assert ovs.open_session(title="Once", idempotency_key="open:thread-9") == session


def test_the_agent_reads_the_conversation_back(ovs, run_id):
    ovs.message(run_id, "Pay invoice 42", kind="user")
    ovs.message(run_id, "Looking it up", data={"invoice": 42})
    read = ovs.messages(run_id)
    assert [(m["seq"], m["kind"], m["payload"]["text"]) for m in read] == [
        (1, "user", "Pay invoice 42"),
        (2, "agent", "Looking it up"),
    ]
    assert [m["seq"] for m in ovs.messages(run_id, after=1)] == [2]


def test_the_catalogue_lists_the_actions_oversight_executes(ovs):
    actions = {action["name"]: action for action in ovs.actions()}
    write = actions["file.write"]
    assert write["executor"] == "server"
    assert {"path", "content"} <= set(write["arguments_schema"]["properties"])
    assert "notes.append" not in actions


def test_a_tool_proposal_carries_its_docstring_as_summary(ovs, run_id, reviewer, tmp_path):
    @ovs.tool(**NOTE, verify=lambda arguments, key: True)
    def append_note(line: str, *, idempotency_key: str) -> None:
        """Append a line to the team's notes.

        Not shown: only the first line is the summary."""

    with deciding(reviewer, "note-1"):
        append_note(run_id, "note-1", line="paid")
    op = Operation.objects.get(call_id="note-1")
    assert op.summary == "Append a line to the team's notes."
    proposal = ovs.propose(
        run_id, "note-2", arguments={"line": "x"}, summary="Add x", rationale="Asked to", **NOTE
    )
    assert (proposal["summary"], proposal["rationale"]) == ("Add x", "Asked to")


def test_a_takeover_returns_what_verify_observed(ovs, run_id, reviewer, tmp_path):
    """An earlier process fired the effect and died before its report: the call that
    takes over gets the output verify read back, not None."""
    notes = tmp_path / "notes.md"
    op = ovs.propose(run_id, "note-1", arguments={"line": "paid"}, **NOTE)
    decide_on(Operation.objects.get(pk=op["id"]), reviewer)
    claim = ovs.claim(op["id"], lease_seconds=1)
    ovs.record_intent(op["id"], claim["epoch"], {"function": "append_note"})
    notes.write_text(f"paid [{claim['idempotency_key']}]\n")
    leases_lapsed()

    def read_back(arguments: dict, key: str) -> Observed:
        lines = notes.read_text().splitlines()
        return Observed("applied", output={"line": len(lines)}) if lines else "absent"

    @ovs.tool(**NOTE, verify=read_back)
    def append_note(line: str, *, idempotency_key: str) -> dict:
        raise AssertionError("the effect is there already: never fired again")

    assert append_note(run_id, "note-1", line="paid") == {"line": 1}
    assert append_note(run_id, "note-1", line="paid") == {"line": 1}  # now stored
    assert Operation.objects.get(pk=op["id"]).result["output"] == {"line": 1}


def test_a_server_action_the_client_gave_up_on_never_fires(
    live_server, client_token, run_id, reviewer
):
    """Approved, but no worker got to it before the wait ran out: the client withdraws
    it, so the worker that comes later finds nothing to do."""
    impatient = client_for(live_server, client_token, wait_timeout=2)

    @impatient.tool(action="file.write", rollback_kind="in_band")
    def write_file(**arguments) -> None:
        raise AssertionError("Oversight's workers execute file.write")

    with deciding(reviewer, "write-1"), pytest.raises(WaitTimedOut) as timed_out:
        write_file(run_id, "write-1", **WRITE)
    assert timed_out.value.operation["status"] == "cancelled"
    Worker(name="late-worker").drain()
    op = Operation.objects.get(call_id="write-1")
    assert (op.status, op.fencing_epoch) == ("cancelled", 0)
    assert not (workspace_of(op.project) / "notes" / "today.md").exists()


def test_a_wait_that_runs_out_while_oversight_executes_waits_for_the_outcome(
    live_server, client_token, run_id, reviewer, caplog
):
    """The withdrawal is refused once a worker holds the operation: the client does not
    pretend it stopped what it cannot stop; it waits for the outcome."""
    impatient = client_for(live_server, client_token, wait_timeout=1)
    op = impatient.propose(run_id, "write-1", "file.write", WRITE, rollback_kind="in_band")
    decide_on(Operation.objects.get(pk=op["id"]), reviewer)
    taken = claim_next(worker="w1", lease=timedelta(seconds=60))
    refused = f"Conflict: /api/v1/operations/{op['id']}/withdraw"  # Django's request log

    def fail(operation: Operation) -> None:
        why = "the effect did not happen: the disk is full"
        transition_operation(
            operation=operation,
            to="failed",
            actor=Actor.worker("w1"),
            reason=why,
            changes={"status_reason": why, "result": {"verified": False, "effect": "absent"}},
        )

    def withdrawal_refused() -> Operation | None:
        return taken if refused in caplog.messages else None

    with (
        caplog.at_level(logging.WARNING, logger="django.request"),
        reviewing(withdrawal_refused, fail, "the refused withdrawal"),
        pytest.raises(Failed) as failed,
    ):
        impatient.wait(op["id"])
    assert failed.value.detail == "the effect did not happen: the disk is full"
    assert Operation.objects.get(pk=op["id"]).status == "failed"
