"""The server log as an operator's pipeline reads it: with OVERSIGHT_LOG_FORMAT=json a
worker writes one JSON object per line, one for each state change it commits, naming
the run, operation and checkpoint; in either format no argument value, secret or token
ever reaches the log, not even through an error's own text."""

import json

import pytest

from runs.actions.files import workspace_of
from runs.models import Checkpoint, Operation
from tests.helpers import decide_on
from tests.processes import manage

pytestmark = pytest.mark.django_db(transaction=True)
# The agent's path, which the file system's error quotes resolved (without "./") when a
# directory stands there.
PATH = "reports/./quarterly-MARKER-9f3a.txt"
CONTENT = "figures nobody outside may read: MARKER-77c1"


@pytest.fixture
def failing_write(propose, reviewer, project):
    """An approved file.write that fails at the file system: its error names the path."""
    (workspace_of(project) / PATH).mkdir(parents=True)
    operation = propose(
        action="file.write",
        arguments={"path": PATH, "content": CONTENT, "expected_sha256": None},
        rollback_kind=Operation.RollbackKind.IN_BAND,
    )
    decide_on(operation, reviewer)
    return operation


def worker_log(format: str) -> str:
    done = manage("runworker", "--once", OVERSIGHT_LOG_FORMAT=format)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_json_lines_name_each_state_change_and_never_an_argument(failing_write):
    before = Checkpoint.objects.filter(run=failing_write.run).count()
    log = worker_log("json")

    lines = [json.loads(line) for line in log.splitlines()]
    assert all({"time", "level", "logger", "message"} <= line.keys() for line in lines)
    written = Checkpoint.objects.filter(run=failing_write.run).order_by("seq")
    changes = [line for line in lines if "checkpoint_id" in line]
    assert [(c["checkpoint_id"], c["message"]) for c in changes] == [
        (c.pk, f"{c.event}: {c.from_status} -> {c.to_status}") for c in written[before:]
    ]
    assert {(c["run_id"], c["operation_id"]) for c in changes} == {
        (failing_write.run_id, failing_write.pk)
    }
    failure = next(line for line in lines if "could not be written" in line["message"])
    assert failure["operation_id"] == failing_write.pk
    assert failure["message"].startswith(
        "file.write: [argument] could not be written: [Errno 21] Is a directory: '/"
    )
    resolved = f"/project-{failing_write.project_id}/[argument]'"
    assert failure["message"].endswith(resolved)  # The path the OS resolved: cut too.
    assert "MARKER" not in log


def test_text_lines_cut_argument_values_too(failing_write):
    log = worker_log("text")
    assert "could not be written" in log
    assert "MARKER" not in log
