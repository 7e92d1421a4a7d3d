"""How the client reads what the server answered about a write: an operation whose
precondition failed when a worker re-checked it raises ``PreconditionFailed`` (from a
wait and from a supervised tool, both clients), and a 409 is final, never sent again
(a retry that reaches the server while its first attempt still runs waits there for
that attempt's answer: ``tests/test_api_replay.py``)."""

import hashlib
from pathlib import Path

import pytest

from oversight_client import Conflict, Oversight, PreconditionFailed
from oversight_client.told import outcome
from runs.actions.files import workspace_of
from runs.engine.worker import Worker
from runs.models import Operation
from tests.client_helpers import CLIENTS, client_for, deciding, drive
from tests.helpers import decide_on
from tests.stand_in_server import serving

pytest_plugins = ["tests.client_helpers"]

PATH = "notes/today.md"
WRITE = {"path": PATH, "content": "hello\n", "expected_sha256": None}  # approved as absent
MEANWHILE = b"written by someone else meanwhile\n"
CHANGED = (
    f"{PATH} has changed since it was approved "
    f"(sha256 {hashlib.sha256(MEANWHILE).hexdigest()}, approved against absent)"
)


@pytest.fixture(params=CLIENTS)
def client(request, live_server, client_token):
    return client_for(live_server, client_token, request.param)


@pytest.fixture
def written_meanwhile(project) -> Path:
    """The file the write was approved against as absent, written since by someone else."""
    path = workspace_of(project) / PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(MEANWHILE)
    return path


def test_a_wait_on_an_operation_whose_precondition_failed_raises_precondition_failed(
    client, run_id, reviewer, written_meanwhile
):
    op = drive(client.propose(run_id, "write-1", "file.write", WRITE, rollback_kind="in_band"))
    decide_on(Operation.objects.get(pk=op["id"]), reviewer)
    Worker(name="test-worker").drain()

    with pytest.raises(PreconditionFailed) as failed:
        drive(client.wait(op["id"], timeout=30))

    assert failed.value.reason == CHANGED
    assert failed.value.operation["status"] == "precondition_failed"
    assert written_meanwhile.read_bytes() == MEANWHILE  # Nothing fired.


def test_a_server_executed_tool_whose_precondition_failed_raises_and_tells_the_model(
    client, run_id, reviewer, written_meanwhile
):
    @client.tool(action="file.write", rollback_kind="in_band")
    def write_file(**arguments):
        raise AssertionError("Oversight's workers execute file.write, never the agent")

    with (
        deciding(reviewer, "write-1", then=Worker(name="test-worker").drain),
        pytest.raises(PreconditionFailed) as failed,
    ):
        drive(write_file(run_id, "write-1", **WRITE))

    assert outcome(failed.value) == f"This call was not made: its precondition failed: {CHANGED}"
    assert Operation.objects.get(call_id="write-1").status == "precondition_failed"
    assert written_meanwhile.read_bytes() == MEANWHILE


def test_a_conflict_is_final_and_never_sent_again(client_token):
    """Even one saying ``request_in_progress``, which the server answered before a retry
    waited there for its first attempt's answer (and the client then sent again)."""
    posts: list[str] = []

    def in_progress(method: str, headers: dict[str, str]) -> tuple[int, bytes]:
        posts.append(headers["Idempotency-Key"])
        return 409, b'{"error": "request_in_progress", "detail": "the first attempt still runs"}'

    with serving(in_progress) as url:
        ovs = Oversight(url, client_token, backoff=0.01)
        with pytest.raises(Conflict) as conflict:
            ovs.message(7, "said once")

    assert (conflict.value.status, conflict.value.code) == (409, "request_in_progress")
    assert len(posts) == 1
