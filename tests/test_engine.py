"""The commit engine in process (PRODUCT.md, "Propose-then-commit"): a worker claims
an approved operation, records its intent, re-checks cancel and precondition,
executes with the idempotency key, verifies by re-reading the target and records the
result — or runs the rollback plan. Crashes are covered by test_engine_crash.py."""

import errno
import json
import os
import threading
import urllib.request
from datetime import timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO

import pytest
from django.core import mail
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone

from runs.actions.files import resolve, workspace_of
from runs.actors import Actor
from runs.canonical import sha256_hex
from runs.engine.boundaries import CLAIMED, EXECUTED
from runs.engine.claims import claim_next
from runs.engine.deliveries import deliver_due
from runs.engine.executor import Execution
from runs.engine.worker import Worker
from runs.errors import InvalidInput, NotPermitted, StaleVersion
from runs.models import (
    Account,
    Alert,
    AlertDelivery,
    Checkpoint,
    LedgerEntry,
    Message,
    Operation,
    Run,
    SentEmail,
)
from runs.services.alerts import acknowledge_alert, resolve_alert
from runs.services.runs import cancel_run
from tests.helpers import blob, decide_on, drained, invariants_hold, refused, steps_since

LEASE = timedelta(seconds=30)
CLAIM = ("operation.status", "approved", "in_flight")
INTENT = ("operation.intent", "in_flight", "in_flight")
VERIFY_FAILED = ("operation.status", "in_flight", "verify_failed")
PATH = "notes/today.md"


def version(run: Run) -> int:
    return Run.objects.get(pk=run.pk).version


@pytest.fixture
def workspace(project):
    """The project's own workspace, where its file.write operations land."""
    folder = workspace_of(project)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def existing_file(workspace):
    """``notes/today.md``, already there before the write."""
    path = workspace / PATH
    path.parent.mkdir(parents=True)
    path.write_text("previous\n")
    return path


# --- The happy path of each action ----------------------------------------------------


@pytest.mark.parametrize("kind", ["file", "ledger", "email", "http"])
def test_executed_operation_is_committed_with_one_checkpoint_per_record(approved, run, kind):
    op = approved(kind)
    before = version(run)

    op = drained(op)

    assert op.status == Operation.Status.COMMITTED
    assert op.result["verified"] is True
    assert steps_since(run, before) == [
        CLAIM,
        INTENT,
        ("operation.status", "in_flight", "committed"),
    ]
    assert list(op.checkpoints.values_list("event", "from_status", "to_status")) == [
        ("operation.proposed", "", "proposed"),
        ("operation.status", "proposed", "approved"),
        CLAIM,
        INTENT,
        ("operation.status", "in_flight", "committed"),
    ]
    run.refresh_from_db()
    assert run.version == Checkpoint.objects.filter(run=run).order_by("-seq").first().seq
    assert invariants_hold()


def test_file_write_creates_a_new_file(approved, workspace):
    op = drained(approved("file"))

    assert op.status == Operation.Status.COMMITTED
    assert (workspace / PATH).read_text() == "hello\n"
    assert op.intent == {"previous": None, "writes": sha256_hex(b"hello\n")}
    assert not op.checkpoints.get(event="operation.intent").artifact_refs.exists()


def test_file_write_keeps_the_previous_version_as_an_artifact(approved, existing_file):
    op = drained(approved("file", expected_sha256=sha256_hex(b"previous\n")))

    assert op.status == Operation.Status.COMMITTED
    assert existing_file.read_text() == "hello\n"
    ref = op.checkpoints.get(event="operation.intent").artifact_refs.get()
    assert ref.name == f"workspace/{PATH}@before"
    assert op.intent["previous"] == ref.artifact.sha256 == sha256_hex(b"previous\n")
    assert blob(ref.artifact).read_bytes() == b"previous\n"


def test_ledger_transfer_moves_the_money_once(approved):
    op = drained(approved("ledger"))

    assert op.status == Operation.Status.COMMITTED
    assert dict(Account.objects.values_list("name", "balance")) == {
        "A": Decimal("4900.00"),
        "B": Decimal("100.00"),
    }
    entry = LedgerEntry.objects.get()
    assert (entry.idempotency_key, entry.amount) == (op.idempotency_key, Decimal("100.00"))


def test_email_is_sent_with_its_message_id(approved):
    op = drained(approved("email"))

    assert op.status == Operation.Status.COMMITTED
    record = SentEmail.objects.get(idempotency_key=op.idempotency_key)
    assert record.status == SentEmail.Status.SENT
    [email] = mail.outbox
    assert email.to == ["ops@example.com"]
    assert email.subject == "Report"
    assert email.extra_headers["Message-ID"] == record.message_id
    assert op.result["output"] == {"message_id": record.message_id}


def test_http_call_is_applied_once_and_reads_back(approved, target):
    op = drained(approved("http"))

    assert op.status == Operation.Status.COMMITTED
    assert target.applied[op.idempotency_key] == 1
    with urllib.request.urlopen(f"{target.base}/items/x") as response:
        assert json.loads(response.read()) == {"colour": "green"}


# --- Preconditions re-checked at commit time -------------------------------------------


def test_transfer_is_not_made_once_the_balance_fell_below_the_approved_floor(approved, run):
    op = approved("ledger")  # require_balance_above 1000, approved while A holds 5000.
    Account.objects.filter(name="A").update(balance=Decimal("500.00"))  # Another workflow.

    op = drained(op)

    assert op.status == Operation.Status.PRECONDITION_FAILED
    assert not LedgerEntry.objects.exists()
    assert "A holds 500.00" in op.result["precondition_failed"]
    [message] = Message.objects.filter(run=run, kind="system")
    assert f"Operation {op.pk} (ledger.transfer) was not executed" in message.payload["text"]
    assert "500.00" in message.payload["text"]


def test_file_changed_after_approval_is_left_untouched(approved, existing_file):
    op = approved("file", expected_sha256=sha256_hex(b"previous\n"))
    existing_file.write_text("edited by someone else\n")

    op = drained(op)

    assert op.status == Operation.Status.PRECONDITION_FAILED
    assert "has changed since it was approved" in op.status_reason
    assert existing_file.read_text() == "edited by someone else\n"


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "notes/../../x"])
def test_path_leaving_the_workspace_is_refused_at_proposal(approved, path):
    with refused(InvalidInput):
        approved("file", path=path)


@pytest.mark.parametrize("link, path", [("link.md", "link.md"), ("out", "out/new.md")])
def test_symlink_leading_outside_the_workspace_is_refused_at_execution(
    approved, workspace, tmp_path, link, path
):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "link.md").write_text("secret\n")
    (workspace / link).symlink_to(outside / "link.md" if link == "link.md" else outside)
    expected = sha256_hex(b"secret\n") if link == "link.md" else None

    op = drained(approved("file", path=path, expected_sha256=expected))

    assert op.status == Operation.Status.PRECONDITION_FAILED
    assert "leads outside the workspace" in op.status_reason
    assert sorted(p.name for p in outside.iterdir()) == ["link.md"]
    assert (outside / "link.md").read_text() == "secret\n"


# --- Verification failure runs the rollback plan ---------------------------------------


def overwrite_file(op: Operation) -> None:
    resolve(op.arguments["path"], op.project).write_text("changed behind the worker's back\n")


def alter_ledger_entry(op: Operation) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_ledgerentry SET amount = amount + 1 WHERE idempotency_key = %s",
            [op.idempotency_key],
        )


def unsend_email(op: Operation) -> None:
    SentEmail.objects.filter(idempotency_key=op.idempotency_key).update(
        status=SentEmail.Status.SENDING
    )


def cannot_reread(op: Operation) -> None:
    raise OSError(errno.EIO, os.strerror(errno.EIO), op.arguments["path"])


def holding(path, content: str | None) -> str | None:
    """``path`` holding ``content`` (None: no file); the sha256 to approve against."""
    if content is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    return sha256_hex(content.encode())


@pytest.mark.parametrize("previous", ["previous\n", None], ids=["existing", "new"])
def test_a_write_someone_else_made_before_verification_is_kept_and_a_person_alerted(
    approved, workspace, at_boundary, run, previous
):
    """A colleague wrote the file between the effect and its verification: restoring the
    previous version (or removing the file) would destroy their work. Undo touches only
    what is visibly the operation's own write; anything else is a person's to settle."""
    path = workspace / PATH
    op = approved("file", expected_sha256=holding(path, previous))
    at_boundary(EXECUTED, overwrite_file)
    before = version(run)

    op = drained(op)

    assert path.read_bytes() == b"changed behind the worker's back\n"
    assert op.status == Operation.Status.ALERTED
    assert f"nothing was rolled back: {PATH} holds content this operation did not write" in (
        op.status_reason
    )
    assert Alert.objects.get(operation=op).status == Alert.Status.OPEN
    run.refresh_from_db()
    assert (run.status, run.reason) == (Run.Status.WAITING, Run.Reason.RECONCILIATION)
    assert steps_since(run, before)[:4] == [
        CLAIM,
        INTENT,
        VERIFY_FAILED,
        ("operation.status", "verify_failed", "alerted"),
    ]


@pytest.mark.parametrize("previous", ["previous\n", None], ids=["existing", "new"])
def test_a_write_its_worker_gave_up_verifying_is_undone(
    approved, workspace, at_boundary, run, settings, previous
):
    """The worker cannot re-read the file after writing it, and gives up: its write is
    there, visibly its own, and the in-band rollback restores the previous version (or
    removes the file it made)."""
    settings.OVERSIGHT_MAX_ATTEMPTS = 1
    path = workspace / PATH
    op = approved("file", expected_sha256=holding(path, previous))
    at_boundary(EXECUTED, cannot_reread)
    before = version(run)

    op = drained(op)

    assert op.status == Operation.Status.ROLLED_BACK
    assert (path.read_text() if path.exists() else None) == previous
    assert steps_since(run, before) == [
        CLAIM,
        INTENT,
        VERIFY_FAILED,
        ("operation.status", "verify_failed", "rolled_back"),
    ]
    assert invariants_hold()


def test_failed_transfer_verification_is_compensated_once(approved, at_boundary, run):
    op = approved("ledger")
    at_boundary(EXECUTED, alter_ledger_entry)
    before = version(run)

    op = drained(op)

    assert op.status == Operation.Status.COMPENSATED
    compensation = LedgerEntry.objects.get(idempotency_key=f"{op.idempotency_key}:compensate")
    assert (compensation.debit.name, compensation.credit.name) == ("B", "A")
    assert compensation.amount == Decimal("100.00")
    assert LedgerEntry.objects.count() == 2
    assert dict(Account.objects.values_list("name", "balance")) == {
        "A": Decimal("5000.00"),
        "B": Decimal("0.00"),
    }
    assert steps_since(run, before)[-1] == ("operation.status", "verify_failed", "compensated")


def test_unverifiable_email_alerts_a_person_and_halts_the_run(
    approved, at_boundary, admin_user, run
):
    op = approved("email")
    at_boundary(EXECUTED, unsend_email)
    worker = Worker(name="w1")

    worker.step()

    op.refresh_from_db()
    assert op.status == Operation.Status.ALERTED
    alert = Alert.objects.get(operation=op)
    assert alert.status == Alert.Status.OPEN
    assert "verification failed" in alert.summary
    assert alert.state_left == {"arguments": op.arguments, "intent": {}}
    run.refresh_from_db()
    assert (run.status, run.reason) == (Run.Status.WAITING, Run.Reason.RECONCILIATION)
    assert run.unblock == f"an admin resolves alert {alert.pk}"
    assert [m.to for m in mail.outbox] == [["ops@example.com"]]  # Only the email itself.

    worker.step()  # Deliveries go out at the worker's next step.

    assert [m.to for m in mail.outbox] == [["ops@example.com"], [admin_user.email]]
    assert mail.outbox[1].subject.startswith(f"[Oversight] Alert {alert.pk}:")
    assert alert.deliveries.get(channel="email").status == AlertDelivery.Status.DELIVERED
    assert invariants_hold()


def test_http_target_that_garbles_the_write_is_alerted_without_sabotage(approved, target, run):
    op = drained(approved("http-rigged-no-undo"))

    assert op.status == Operation.Status.ALERTED
    assert op.result["effect"] == "uncertain"
    assert target.applied[op.idempotency_key] == 1  # It answered 200 and stored {"id": "x"}.
    assert Alert.objects.get(operation=op).status == Alert.Status.OPEN
    run.refresh_from_db()
    assert run.reason == Run.Reason.RECONCILIATION


# --- Alert deliveries ------------------------------------------------------------------


class Hook(BaseHTTPRequestHandler):
    def log_message(self, format, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        server = self.server
        server.received.append((self.headers["Idempotency-Key"], json.loads(body)))
        status = 500 if len(server.received) <= server.failures else 200
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def webhook(settings):
    """A local webhook receiver that answers 500 to the first ``failures`` POSTs."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    server.received, server.failures = [], 1
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    settings.OVERSIGHT_ALERT_WEBHOOK_URL = server.url
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def alert(approved, webhook) -> Alert:
    op = approved("http-rigged-no-undo")
    Worker(name="w1").step()
    return Alert.objects.get(operation=op)


def test_webhook_delivery_is_retried_after_a_failure(alert, webhook):
    delivery = alert.deliveries.get(channel=AlertDelivery.Channel.WEBHOOK)
    assert delivery.target == webhook.url

    assert deliver_due() == 1

    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == (AlertDelivery.Status.PENDING, 1)
    assert delivery.last_error.startswith("attempt 1:")
    assert "500" in delivery.last_error
    assert deliver_due() == 0  # Not due again before its backoff.

    assert deliver_due(now=timezone.now() + timedelta(minutes=5)) == 1

    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == (AlertDelivery.Status.DELIVERED, 2)
    assert delivery.last_error == ""
    assert webhook.received[-1] == (
        f"alert-{alert.pk}",
        {
            "alert": alert.pk,
            "project": alert.project_id,
            "run": alert.run_id,
            "operation": alert.operation_id,
            "summary": alert.summary,
            "state_left": alert.state_left,
        },
    )
    assert len(webhook.received) == 2


def test_webhook_delivery_gives_up_after_the_attempt_limit(alert, webhook, settings):
    settings.OVERSIGHT_ALERT_MAX_ATTEMPTS = 2
    webhook.failures = 99
    delivery = alert.deliveries.get(channel=AlertDelivery.Channel.WEBHOOK)

    deliver_due()
    deliver_due(now=timezone.now() + timedelta(minutes=5))

    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == (AlertDelivery.Status.FAILED, 2)
    assert delivery.last_error.startswith("attempt 2:")
    assert deliver_due(now=timezone.now() + timedelta(hours=2)) == 0
    assert len(webhook.received) == 2


# --- A run halted for reconciliation ---------------------------------------------------


@pytest.fixture
def halted(approved):
    """A run halted by an alert, with another approved operation behind it."""
    rigged, waiting = approved("http-rigged-no-undo"), approved("ledger")
    Worker(name="w1").step()
    return Alert.objects.get(operation=rigged), waiting


def test_halted_run_is_not_worked_on_until_its_alert_is_resolved(halted, admin_user, run):
    alert, waiting = halted

    assert drained(waiting).status == Operation.Status.APPROVED
    assert not LedgerEntry.objects.exists()

    before = version(run)
    acknowledge_alert(alert=alert, user=admin_user)
    resolve_alert(alert=alert, user=admin_user, note="fixed")

    assert steps_since(run, before) == [
        ("alert.status", "open", "acknowledged"),
        ("alert.status", "acknowledged", "resolved"),
        ("run.status", "waiting", "queued"),
    ]
    alert.refresh_from_db()
    assert (alert.status, alert.resolution_note, alert.resolved_by) == (
        "resolved",
        "fixed",
        admin_user,
    )
    assert drained(waiting).status == Operation.Status.COMMITTED


@pytest.mark.parametrize(
    "who, note, error", [("admin_user", "  ", InvalidInput), ("reviewer", "fixed", NotPermitted)]
)
def test_resolving_an_alert_needs_a_note_and_the_permission(halted, request, who, note, error):
    alert, _ = halted
    user = request.getfixturevalue(who)

    with refused(error):
        resolve_alert(alert=alert, user=user, note=note)

    alert.refresh_from_db()
    assert alert.status == Alert.Status.OPEN


def test_reviewer_cannot_acknowledge_an_alert(halted, reviewer):
    alert, _ = halted

    with refused(NotPermitted):
        acknowledge_alert(alert=alert, user=reviewer)


# --- Cancel, stale leases, lapsed approvals --------------------------------------------


@pytest.fixture
def cancel_at(at_boundary, admin_user):
    def cancel_at(boundary: str) -> None:
        def cancel(op: Operation) -> None:
            cancel_run(run=op.run, actor=Actor.of_user(admin_user), reason="stop")

        at_boundary(boundary, cancel)

    return cancel_at


def test_run_cancelled_before_the_effect_fired_cancels_the_operation(
    approved, target, cancel_at, run
):
    op = approved("http")
    cancel_at(CLAIMED)

    op = drained(op)

    assert op.status == Operation.Status.CANCELLED
    assert op.intent is None
    assert target.applied[op.idempotency_key] == 0
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED


def test_run_cancelled_after_the_effect_fired_records_it_committed(
    approved, target, cancel_at, run
):
    op = approved("http")
    cancel_at(EXECUTED)

    op = drained(op)

    assert op.status == Operation.Status.COMMITTED
    assert op.result["verified"] is True
    assert target.applied[op.idempotency_key] == 1
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert invariants_hold()


def test_worker_whose_lease_was_taken_over_writes_nothing(approved, target):
    op = approved("http")
    a = claim_next(worker="A", lease=timedelta(seconds=1))
    b = claim_next(worker="B", lease=LEASE, now=timezone.now() + timedelta(seconds=5))

    assert (a.fencing_epoch, b.fencing_epoch) == (1, 2)
    takeover = op.checkpoints.get(event="operation.lease_taken_over")
    assert (takeover.from_status, takeover.to_status) == ("in_flight", "in_flight")
    assert takeover.state["lease"]["owner"] == "B"
    assert takeover.state["lease"]["epoch"] == 2

    with refused(StaleVersion):
        Execution(a, "A", LEASE).run()
    assert target.applied[op.idempotency_key] == 0

    Execution(b, "B", LEASE).run()

    op.refresh_from_db()
    assert (op.status, op.lease_owner, op.fencing_epoch) == ("committed", "B", 2)
    assert target.applied[op.idempotency_key] == 1


def test_lapsed_approval_expires_instead_of_executing(approved):
    op = approved("ledger")
    Operation.objects.filter(pk=op.pk).update(
        approval_expires_at=timezone.now() - timedelta(seconds=1)
    )

    assert Worker(name="w1").step() is True

    op.refresh_from_db()
    assert (op.status, op.status_reason) == (Operation.Status.EXPIRED, "approval lapsed")
    assert not LedgerEntry.objects.exists()


def test_operation_the_agent_executes_is_never_claimed(propose, reviewer, run):
    op = propose("push", action="git.push", arguments={"branch": "main"}, rollback_kind="none")
    decide_on(op, reviewer)
    assert (op.status, op.executor) == (Operation.Status.APPROVED, Operation.Executor.AGENT)
    before = version(run)

    assert Worker(name="w1").step() is False

    assert claim_next(worker="w1", lease=LEASE) is None
    op.refresh_from_db()
    assert op.status == Operation.Status.APPROVED
    assert version(run) == before


# --- manage.py runworker ---------------------------------------------------------------


def test_runworker_once_drains_every_approved_operation(approved):
    ops = [approved(kind) for kind in ("file", "ledger", "email", "http")]

    call_command("runworker", "--once", "--name", "cmd", stdout=StringIO())

    assert {op.status for op in Operation.objects.filter(pk__in=[o.pk for o in ops])} == {
        Operation.Status.COMMITTED
    }
    claims = Checkpoint.objects.filter(event="operation.status", to_status="in_flight")
    assert set(claims.values_list("actor_label", flat=True)) == {"cmd"}
    assert claims.count() == 4


def test_runworker_refuses_a_lease_that_is_not_positive():
    with pytest.raises(CommandError, match="--lease-seconds must be positive"):
        call_command("runworker", "--once", "--lease-seconds", "0")
