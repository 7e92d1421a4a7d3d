"""The sync client (``oversight_client.Oversight``) against a real server: pytest-django's
live server, a real agent token, and reviewers deciding through the services."""

import hashlib
import socket
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from oversight_client import (
    Cancelled,
    Conflict,
    Expired,
    Failed,
    InvalidRequest,
    NotFound,
    Oversight,
    Rejected,
    RunClosed,
    StaleState,
    Unauthorized,
    Unreachable,
    VerificationFailed,
    WaitTimedOut,
)
from oversight_client.tools import Execution
from runs.actions.files import workspace_of
from runs.actors import Actor
from runs.clock import db_now
from runs.engine.claims import claim_next
from runs.engine.worker import Worker
from runs.models import Alert, Decision, Message, Operation, Run
from runs.services.decisions import expire_if_due
from runs.services.runs import cancel_run
from runs.transitions import transition_operation
from tests.client_helpers import NOTE, deciding
from tests.helpers import decide_on
from tests.processes import leases_lapsed
from tests.stand_in_server import serving

pytest_plugins = ["tests.client_helpers", "tests.ports"]


@pytest.fixture
def notes(tmp_path) -> Path:
    return tmp_path / "notes.md"


def proposed(ovs: Oversight, run_id: int, call_id: str = "note-1", **arguments) -> dict:
    return ovs.propose(run_id, call_id, arguments=arguments or {"line": "paid"}, **NOTE)


def operation(op: dict) -> Operation:
    return Operation.objects.get(pk=op["id"])


def approved(ovs: Oversight, run_id: int, reviewer, **arguments) -> dict:
    op = proposed(ovs, run_id, **arguments)
    decide_on(operation(op), reviewer)
    return op


def lapse(op: dict) -> None:
    """The operation's lease lapsed a second ago, in the database's clock."""
    Operation.objects.filter(pk=op["id"]).update(lease_expires_at=db_now() - timedelta(seconds=1))


# --- runs, proposals and decisions -------------------------------------------------------


def test_session_run_messages_and_an_approved_proposal(ovs, reviewer):
    session = ovs.open_session(title="Month-end", agent="clerk")
    assert (session["title"], session["agent"], session["owner"]) == ("Month-end", "clerk", "owner")
    run = ovs.start_run(session["id"], goal="Pay the supplier invoice")
    assert run["status"] == "running"

    assert ovs.message(run["id"], "Looking at the invoice") == 1
    assert ovs.message(run["id"], "Found it", data={"invoice": 42}) == 2

    op = proposed(ovs, run["id"])
    assert (op["status"], op["executor"]) == ("proposed", "agent")
    with deciding(reviewer, "note-1"):
        waited = ovs.wait(op["id"], timeout=20)
    assert (waited["id"], waited["status"]) == (op["id"], "approved")
    assert [d["by"] for d in waited["decisions"]] == ["reviewer"]


def test_a_proposal_is_idempotent_on_its_call_id(ovs, run_id):
    first = proposed(ovs, run_id)
    ovs.upload_artifact(run_id, "moved-on.txt", b"the run moved on")
    assert proposed(ovs, run_id)["id"] == first["id"]
    with pytest.raises(Conflict) as conflict:
        proposed(ovs, run_id, line="something else")
    assert (conflict.value.status, conflict.value.code) == (409, "conflicting_proposal")
    assert Operation.objects.count() == 1


def test_a_rejection_carries_the_reason(ovs, run_id, reviewer):
    op = proposed(ovs, run_id)
    decide_on(operation(op), reviewer, Decision.Kind.REJECT, comment="not on a Friday")
    with pytest.raises(Rejected) as rejected:
        ovs.wait(op["id"], timeout=5)
    assert (rejected.value.reason, rejected.value.reply) == ("not on a Friday", None)
    assert rejected.value.operation["status"] == "rejected"


def test_a_reply_carries_the_reviewer_message(ovs, run_id, reviewer):
    op = proposed(ovs, run_id)
    reply = deciding(reviewer, "note-1", Decision.Kind.REPLY, comment="append to the June file")
    with reply, pytest.raises(Rejected) as rejected:
        ovs.wait(op["id"], timeout=20)
    assert (rejected.value.reason, rejected.value.reply) == (None, "append to the June file")


def test_a_wait_that_times_out_withdraws_the_proposal(ovs, run_id):
    op = proposed(ovs, run_id)
    with pytest.raises(WaitTimedOut) as timed_out:
        ovs.wait(op["id"], timeout=1)
    assert timed_out.value.operation["status"] == "cancelled"
    assert "stopped waiting after 1 s" in operation(op).status_reason


def test_an_expired_proposal_raises_expired(ovs, run_id):
    op = proposed(ovs, run_id)
    assert expire_if_due(operation(op), timezone.now() + timedelta(days=365))
    with pytest.raises(Expired) as expired:
        ovs.wait(op["id"], timeout=5)
    assert expired.value.code == "expired"


def test_a_cancelled_run_raises_cancelled(ovs, run_id, admin_user):
    op = proposed(ovs, run_id)
    cancel_run(run=Run.objects.get(pk=run_id), actor=Actor.of_user(admin_user), reason="stop")
    with pytest.raises(Cancelled):
        ovs.wait(op["id"], timeout=5)
    with pytest.raises(Cancelled) as closed:
        ovs.message(run_id, "still there?")
    assert isinstance(closed.value, RunClosed)
    assert (closed.value.status, closed.value.code) == (409, "run_closed")


def test_a_proposal_on_a_stale_version_raises_stale_state(ovs, run_id):
    version = ovs.run(run_id)["version"]
    proposed(ovs, run_id, "note-0")  # the run now waits: a new version
    with pytest.raises(StaleState) as stale:
        ovs.propose(
            run_id, "note-1", "notes.append", {}, rollback_kind="in_band", base_version=version
        )
    assert (stale.value.status, stale.value.code) == (409, "stale_version")
    assert Operation.objects.count() == 1


def test_error_answers_are_typed(ovs, live_server, run_id):
    with pytest.raises(NotFound):
        ovs.run(run_id + 1000)
    with pytest.raises(InvalidRequest) as invalid:
        ovs.finish(run_id, "partial")
    assert (invalid.value.status, invalid.value.field) == (422, "outcome")
    with pytest.raises(Unauthorized):
        Oversight(live_server.url, "ovs_nope_nope").run(run_id)


def test_artifacts_round_trip(ovs, run_id):
    content = bytes(range(256)) * 4
    uploaded = ovs.upload_artifact(run_id, "dump.bin", content)
    assert uploaded["sha256"] == hashlib.sha256(content).hexdigest()
    assert uploaded["size"] == len(content)
    assert ovs.fetch_artifact(uploaded["sha256"]) == content


def test_resume_reports_the_recovery_case(ovs, run_id, reviewer):
    assert ovs.resume(run_id).case == "no_decision"
    op = proposed(ovs, run_id)
    decide_on(operation(op), reviewer)

    resume = ovs.resume(run_id)
    assert resume.case == "decision_no_result"
    assert "idempotency key" in resume.guidance
    assert [(o["id"], o["status"]) for o in resume.operations] == [(op["id"], "approved")]
    assert resume.run["id"] == run_id

    claim = ovs.claim(op["id"])
    ovs.record_intent(op["id"], claim["epoch"], {"step": "appending"})
    ovs.report(op["id"], claim["epoch"], verified=True, output={"ok": True})
    assert ovs.resume(run_id).case == "result_and_checkpoint"
    assert [c["event"] for c in ovs.checkpoints(run_id)][-1] == "operation.status"


# --- executing an operation step by step ------------------------------------------------


def test_a_report_says_what_verification_showed(ovs, run_id, reviewer):
    op = approved(ovs, run_id, reviewer)
    claim = ovs.claim(op["id"])
    with pytest.raises(Conflict):
        ovs.report(op["id"], claim["epoch"], effect="applied")  # No intent yet.
    ovs.record_intent(op["id"], claim["epoch"], {})
    ended = ovs.report(op["id"], claim["epoch"], effect="absent", error="refused")
    assert (ended["status"], ended["status_reason"]) == (
        "failed",
        "the effect did not happen: refused",
    )
    with pytest.raises(Failed) as failed:
        ovs.wait(op["id"], timeout=5)
    assert failed.value.result["effect"] == "absent"


def test_an_intent_after_cancel_raises_cancelled(ovs, run_id, reviewer, admin_user):
    op = approved(ovs, run_id, reviewer)
    claim = ovs.claim(op["id"])
    cancel_run(run=Run.objects.get(pk=run_id), actor=Actor.of_user(admin_user), reason="stop")
    with pytest.raises(Cancelled):
        ovs.record_intent(op["id"], claim["epoch"], {})
    assert operation(op).status == "cancelled"


def test_a_claim_on_a_cancelled_run_raises_cancelled(ovs, run_id, reviewer, admin_user):
    op = approved(ovs, run_id, reviewer)
    claim = ovs.claim(op["id"])
    ovs.record_intent(op["id"], claim["epoch"], {})
    cancel_run(run=Run.objects.get(pk=run_id), actor=Actor.of_user(admin_user), reason="stop")
    lapse(op)
    with pytest.raises(Cancelled):
        ovs.claim(op["id"])
    assert operation(op).fencing_epoch == claim["epoch"]


def test_a_run_cannot_finish_before_the_rollback_is_reported(ovs, run_id, reviewer):
    op = approved(ovs, run_id, reviewer)
    claim = ovs.claim(op["id"])
    ovs.record_intent(op["id"], claim["epoch"], {})
    ovs.report(op["id"], claim["epoch"], effect="uncertain")
    with pytest.raises(Conflict) as refused:
        ovs.finish(run_id, "completed")
    assert refused.value.code == "run_not_accepting"
    assert f"{op['id']} (verify_failed)" in refused.value.detail
    ovs.roll_back(op["id"], claim["epoch"], "rolled_back")
    assert ovs.finish(run_id, "completed")["status"] == "completed"


def test_a_server_operation_that_failed_raises_failed(ovs, run_id, reviewer):
    op = ovs.propose(
        run_id,
        "write-1",
        "file.write",
        {"path": "notes/today.md", "content": "hello\n", "expected_sha256": None},
        rollback_kind="in_band",
    )
    decide_on(operation(op), reviewer)
    taken = claim_next(worker="w1", lease=timedelta(seconds=60))
    why = "the effect did not happen: today.md changed since it was approved"
    transition_operation(
        operation=taken,
        to="failed",
        actor=Actor.worker("w1"),
        reason=why,
        changes={"status_reason": why, "result": {"verified": False, "effect": "absent"}},
    )
    with pytest.raises(Failed) as failed:
        ovs.wait(op["id"], timeout=3)
    assert (failed.value.code, failed.value.detail) == ("failed", why)


# --- supervised tools ------------------------------------------------------------------


def line_is_there(arguments: dict, key: str) -> bool:
    path = Path(arguments["path"])
    return path.exists() and f"{arguments['line']} [{key}]\n" in path.read_text()


def remove_line(arguments: dict, key: str) -> None:
    path = Path(arguments["path"])
    if path.exists():
        path.write_text(path.read_text().replace(f"{arguments['line']} [{key}]\n", ""))


def note_tool(ovs: Oversight, calls: list, **options):
    """An agent-executed tool appending a line (tagged with the idempotency key)."""
    options.setdefault("verify", line_is_there)

    @ovs.tool(**NOTE, **options)
    def append_note(path: str, line: str, *, idempotency_key: str) -> dict:
        calls.append(idempotency_key)
        with open(path, "a") as notes:
            notes.write(f"{line} [{idempotency_key}]\n")
        return {"appended": line}

    return append_note


def test_an_agent_executed_tool_runs_once_verified(ovs, run_id, reviewer, notes):
    calls, verified = [], []

    def verify(arguments: dict, key: str) -> bool:
        verified.append(key)
        return line_is_there(arguments, key)

    append_note = note_tool(ovs, calls, verify=verify)
    with deciding(reviewer, "note-1"):
        assert append_note(run_id, "note-1", path=str(notes), line="paid") == {"appended": "paid"}
    op = Operation.objects.get(call_id="note-1")
    assert calls == verified == [op.idempotency_key]
    assert notes.read_text() == f"paid [{op.idempotency_key}]\n"
    assert op.status == "committed"
    assert op.result == {
        "verified": True,
        "effect": "applied",
        "output": {"appended": "paid"},
        "error": "",
    }

    assert append_note(run_id, "note-1", path=str(notes), line="paid") == {"appended": "paid"}
    assert len(calls) == 1
    assert Operation.objects.count() == 1


def test_a_tool_runs_with_the_arguments_the_reviewer_edited(ovs, run_id, reviewer, notes):
    calls = []
    append_note = note_tool(ovs, calls)
    edited = {"path": str(notes), "line": "paid, ref 7"}
    with deciding(reviewer, "note-1", Decision.Kind.EDIT, arguments=edited):
        assert append_note(run_id, "note-1", path=str(notes), line="paid") == {
            "appended": "paid, ref 7"
        }
    assert notes.read_text().startswith("paid, ref 7 [")


def test_a_tool_verifies_an_interrupted_attempt_instead_of_running_again(
    ovs, run_id, reviewer, notes
):
    """An earlier process claimed, recorded its intent, fired the effect and died."""
    op = proposed(ovs, run_id, path=str(notes), line="paid")
    decide_on(operation(op), reviewer)
    claim = ovs.claim(op["id"], lease_seconds=1)
    ovs.record_intent(op["id"], claim["epoch"], {"function": "append_note"})
    notes.write_text(f"paid [{claim['idempotency_key']}]\n")
    leases_lapsed()

    calls = []
    append_note = note_tool(ovs, calls)
    assert append_note(run_id, "note-1", path=str(notes), line="paid") is None
    assert calls == []
    assert operation(op).status == "committed"
    assert notes.read_text() == f"paid [{claim['idempotency_key']}]\n"


def test_an_unverified_tool_ends_alerted(ovs, run_id, reviewer, notes):
    calls = []
    append_note = note_tool(ovs, calls, verify=lambda arguments, key: False)
    with deciding(reviewer, "note-1"), pytest.raises(VerificationFailed) as failed:
        append_note(run_id, "note-1", path=str(notes), line="paid")
    assert failed.value.outcome == "alerted"
    op = Operation.objects.get(call_id="note-1")
    assert op.status == "alerted"
    assert Alert.objects.filter(operation=op).exists()
    assert len(calls) == 1


def test_an_unverified_tool_with_undo_ends_rolled_back(ovs, run_id, reviewer, notes):
    calls = []
    append_note = note_tool(ovs, calls, verify=lambda arguments, key: False, undo=remove_line)
    with deciding(reviewer, "note-1"), pytest.raises(VerificationFailed) as failed:
        append_note(run_id, "note-1", path=str(notes), line="paid")
    assert failed.value.outcome == "rolled_back"
    assert Operation.objects.get(call_id="note-1").status == "rolled_back"
    assert notes.read_text() == ""


def test_a_tool_that_raises_is_undone_and_reported(ovs, run_id, reviewer, notes):
    @ovs.tool(**NOTE, verify=line_is_there, undo=remove_line)
    def append_note(path: str, line: str, *, idempotency_key: str) -> None:
        raise OSError("disk full")

    with deciding(reviewer, "note-1"), pytest.raises(VerificationFailed) as failed:
        append_note(run_id, "note-1", path=str(notes), line="paid")
    assert isinstance(failed.value.__cause__, OSError)
    op = Operation.objects.get(call_id="note-1")
    assert op.status == "rolled_back"
    assert op.result["error"] == "OSError: disk full"


def test_a_tool_whose_effect_is_absent_raises_failed_and_undoes_nothing(
    ovs, run_id, reviewer, notes
):
    calls, undone = [], []
    append_note = note_tool(
        ovs,
        calls,
        verify=lambda arguments, key: "absent",
        undo=lambda arguments, key: undone.append(key),
    )
    with deciding(reviewer, "note-1"), pytest.raises(Failed) as failed:
        append_note(run_id, "note-1", path=str(notes), line="paid")
    op = Operation.objects.get(call_id="note-1")
    assert (op.status, op.lease_expires_at) == ("failed", None)
    assert failed.value.code == "failed"
    assert failed.value.result["effect"] == "absent"
    assert "append_note ran but its effect is not there" in failed.value.detail
    assert (len(calls), undone) == (1, [])
    assert not Alert.objects.exists()


def test_a_tool_that_raised_and_did_nothing_raises_failed(ovs, run_id, reviewer, notes):
    @ovs.tool(**NOTE, verify=lambda arguments, key: "absent", undo=remove_line)
    def append_note(path: str, line: str, *, idempotency_key: str) -> None:
        raise PermissionError("read-only file system")

    with deciding(reviewer, "note-1"), pytest.raises(Failed) as failed:
        append_note(run_id, "note-1", path=str(notes), line="paid")
    assert isinstance(failed.value.__cause__, PermissionError)
    op = Operation.objects.get(call_id="note-1")
    assert op.status == "failed"
    assert op.result["error"] == "PermissionError: read-only file system"


def test_an_uncertain_tool_is_undone(ovs, run_id, reviewer, notes):
    calls = []
    append_note = note_tool(ovs, calls, verify=lambda arguments, key: "uncertain", undo=remove_line)
    with deciding(reviewer, "note-1"), pytest.raises(VerificationFailed) as failed:
        append_note(run_id, "note-1", path=str(notes), line="paid")
    assert failed.value.outcome == "rolled_back"
    op = Operation.objects.get(call_id="note-1")
    assert (op.status, op.result["effect"]) == ("rolled_back", "uncertain")
    assert notes.read_text() == ""


def test_a_tool_that_raised_after_its_effect_landed_commits(ovs, run_id, reviewer, notes):
    @ovs.tool(**NOTE, verify=line_is_there)
    def append_note(path: str, line: str, *, idempotency_key: str) -> None:
        with open(path, "a") as handle:
            handle.write(f"{line} [{idempotency_key}]\n")
        raise TimeoutError("no answer after the write")

    with deciding(reviewer, "note-1"):
        assert append_note(run_id, "note-1", path=str(notes), line="paid") is None
    op = Operation.objects.get(call_id="note-1")
    assert (op.status, op.result["effect"]) == ("committed", "applied")


def test_a_resumed_tool_that_cannot_tell_goes_to_the_rollback_plan(ovs, run_id, reviewer, notes):
    """An earlier process recorded its intent and died; verify cannot tell whether its
    effect happened: the tool does not fire again, it reports and undoes."""
    op = approved(ovs, run_id, reviewer, path=str(notes), line="paid")
    claim = ovs.claim(op["id"])
    ovs.record_intent(op["id"], claim["epoch"], {"function": "append_note"})
    lapse(op)

    calls, undone = [], []
    append_note = note_tool(
        ovs,
        calls,
        verify=lambda arguments, key: "uncertain",
        undo=lambda arguments, key: undone.append(key),
    )
    with pytest.raises(VerificationFailed) as failed:
        append_note(run_id, "note-1", path=str(notes), line="paid")
    assert failed.value.outcome == "rolled_back"
    assert (calls, undone) == ([], [claim["idempotency_key"]])
    assert operation(op).fencing_epoch == claim["epoch"] + 1


def test_a_takeover_of_an_unreported_rollback_goes_straight_to_it(ovs, run_id, reviewer, notes):
    """An earlier process reported an uncertain effect and died before its rollback."""
    op = approved(ovs, run_id, reviewer, path=str(notes), line="paid")
    claim = ovs.claim(op["id"])
    ovs.record_intent(op["id"], claim["epoch"], {"function": "append_note"})
    ovs.report(op["id"], claim["epoch"], effect="uncertain", error="no answer")
    lapse(op)

    takeover = ovs.claim(op["id"])
    assert (takeover["status"], takeover["intent"]) == (
        "verify_failed",
        {"function": "append_note"},
    )
    calls, undone = [], []
    execution = Execution(
        ovs._core,
        ovs.operation(op["id"]),
        takeover,
        fn=lambda **arguments: calls.append(arguments),
        verify=lambda arguments, key: calls.append("verify"),
        undo=lambda arguments, key: undone.append(key),
    )
    with pytest.raises(VerificationFailed) as failed:
        ovs._drive(execution.steps())
    assert failed.value.outcome == "rolled_back"
    assert (calls, undone) == ([], [claim["idempotency_key"]])


def test_a_tool_refuses_a_verify_answer_it_cannot_read(ovs, run_id, reviewer, notes):
    calls = []
    append_note = note_tool(ovs, calls, verify=lambda arguments, key: "probably")
    with deciding(reviewer, "note-1"), pytest.raises(TypeError, match="probably"):
        append_note(run_id, "note-1", path=str(notes), line="paid")
    assert Operation.objects.get(call_id="note-1").status == "in_flight"  # For the sweep.


def test_a_server_executed_tool_returns_the_committed_result(ovs, run_id, reviewer):
    calls = []

    @ovs.tool(action="file.write", rollback_kind="in_band")
    def write_file(**arguments):
        calls.append(arguments)

    arguments = {"path": "notes/today.md", "content": "hello\n", "expected_sha256": None}
    with deciding(reviewer, "write-1", then=Worker(name="test-worker").drain):
        result = write_file(run_id, "write-1", **arguments)
    op = Operation.objects.get(call_id="write-1")
    assert (op.executor, op.status) == ("server", "committed")
    assert result == op.result["output"] is not None
    assert calls == []
    assert (workspace_of(op.project) / "notes" / "today.md").read_text() == "hello\n"


# --- retries ---------------------------------------------------------------------------


class FlakyProxy:
    """A TCP proxy to the live server whose first POST fails on the way: it is
    dropped before it reaches the server (``lose="request"``), or its response is
    (``lose="response"``). Handles one connection at a time."""

    def __init__(self, upstream: str, lose: str = "") -> None:
        host, port = upstream.removeprefix("http://").split(":")
        self.upstream, self.lose = (host, int(port)), lose
        self.posts: list[bytes] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def keys(self) -> list[str]:
        return [header(post, b"idempotency-key") for post in self.posts]

    def close(self) -> None:
        self.listener.close()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with client:
                self._relay(client)

    def _relay(self, client: socket.socket) -> None:
        request = read_request(client)
        first_post = request.startswith(b"POST") and not self.posts
        if request.startswith(b"POST"):
            self.posts.append(request)
        if first_post and self.lose == "request":
            return
        response = self.forward(request)
        if not (first_post and self.lose == "response"):
            client.sendall(response)

    def forward(self, request: bytes) -> bytes:
        """The live server's whole answer to ``request``."""
        with socket.create_connection(self.upstream) as server:
            server.sendall(request)
            return b"".join(iter(lambda: server.recv(65536), b""))


def read_request(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(header(head, b"content-length") or 0)
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def header(request: bytes, name: bytes) -> str:
    for line in request.split(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip().decode()
    return ""


@pytest.fixture
def flaky(live_server, client_token):
    """``flaky("request" | "response")``: a client behind a FlakyProxy."""
    proxies = []

    def make(lose: str) -> tuple[Oversight, FlakyProxy]:
        proxies.append(FlakyProxy(live_server.url, lose))
        return Oversight(proxies[-1].url, client_token, timeout=10, backoff=0.01), proxies[-1]

    yield make
    for proxy in proxies:
        proxy.close()


def test_a_request_lost_on_the_way_is_sent_again_with_the_same_key(flaky, run_id):
    ovs, proxy = flaky("request")
    op = proposed(ovs, run_id)
    assert len(proxy.posts) == 2
    assert proxy.keys()[0] == proxy.keys()[1] != ""
    assert list(Operation.objects.values_list("pk", flat=True)) == [op["id"]]


def test_a_lost_response_is_replayed_not_repeated(flaky, run_id):
    ovs, proxy = flaky("response")
    assert ovs.message(run_id, "said once") == 1
    assert proxy.keys()[0] == proxy.keys()[1] != ""
    assert Message.objects.filter(run_id=run_id).count() == 1
    assert ovs.message(run_id, "said twice") == 2


def test_an_unreachable_server_raises_after_the_retries(client_token, refused_port):
    ovs = Oversight(f"http://127.0.0.1:{refused_port}", client_token, retries=2, backoff=0.01)
    with pytest.raises(Unreachable) as unreachable:
        ovs.open_session()
    assert unreachable.value.status is None


def test_too_many_waits_is_retried_after_the_time_the_server_asks(client_token):
    """A 429 (the server's cap on concurrent long-polls) is waited out, for at least
    its Retry-After, and the request sent again."""
    arrivals: list[float] = []

    def busy_once(method: str, headers: dict[str, str]):
        arrivals.append(time.monotonic())
        if len(arrivals) == 1:
            return 429, b'{"error": "too_many_waits", "detail": "busy"}', {"Retry-After": "1"}
        return 200, b'{"id": 7}'

    with serving(busy_once) as url:
        assert Oversight(url, client_token, backoff=0.01).run(7) == {"id": 7}
    assert len(arrivals) == 2
    assert arrivals[1] - arrivals[0] >= 1
