"""Rehearsing the rollback plans end to end (PRODUCT.md, Article 14: "rollbacks are
rehearsed end to end by a command anyone can run"; ``manage.py rehearse_rollback``).

``rehearse()`` drives real operations down the path production uses: an agent proposes,
reviewers approve through the decision service (two people where the risk asks for
two), and the worker's own ``step()`` claims, executes, verifies and rolls back. One
operation commits; for each rollback kind one fails its verification for a reason the
world can give:

- in-band (``file.write``): the file cannot be re-read after the write (an I/O error),
  and the worker gives up at once; its write, still there, must be undone, the previous
  version back from its artifact (a file someone else changed meanwhile is not undone
  but alerted: it is their work);
- compensating (``ledger.transfer``): another writer alters the ledger entry between
  the transfer and its verification; a compensating transfer must restore both
  balances;
- out-of-band (``email.send``): the mail server drops the connection while the message
  is handed over, so nobody knows whether it left; a person must be alerted, the run
  halted, and the alert delivered in-app and by email.

Each scenario is checked for its outcome, its effect and its checkpoints (in order,
with the run's hash chain intact); each check is one line of the report.

It writes to the current database under names of its own, but keeps files and mail
to itself: a temporary workspace and artifact store, mail held in memory, no alert
webhook, no extra alert recipients. A worker's step takes whatever work is due, so it
refuses to start where other work waits; the command gives it a throwaway database.
"""

import errno
import logging
import os
import secrets
import smtplib
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import mail
from django.core.mail.backends import locmem
from django.db.models import F
from django.test.utils import override_settings
from django.utils import timezone

from runs.actions.files import resolve
from runs.actors import Actor
from runs.canonical import sha256_hex
from runs.chain import verify_run_chain
from runs.engine.boundaries import EXECUTED, boundary_reached
from runs.engine.claims import claimable
from runs.engine.worker import Worker
from runs.invariants import violations
from runs.models import (
    Account,
    Alert,
    AlertDelivery,
    Decision,
    LedgerEntry,
    Operation,
    Project,
    Role,
    Run,
    SentEmail,
)
from runs.permissions import role_group
from runs.services.decisions import decide
from runs.services.proposals import propose_operation
from runs.services.runs import open_session, start_run

log = logging.getLogger(__name__)
Status = Operation.Status
AGENT = Actor.agent("rehearsal-agent")
DOMAIN = "rehearsal.invalid"
UNREACHABLE = f"unreachable.{DOMAIN}"
LABELS = {
    "operation.proposed": "proposed",
    "operation.approval": "approval",
    "operation.intent": "intent",
    "operation.lease_taken_over": "taken over",
}


class RehearsalRefused(Exception):
    """The database holds work a worker would take along with the rehearsal's."""


@dataclass(frozen=True)
class Check:
    scenario: str
    name: str
    passed: bool
    detail: str

    def __str__(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        return f"{verdict}  {self.scenario:<12} {self.name:<12} {self.detail}"


class DroppingMailBackend(locmem.EmailBackend):
    """Keeps mail in memory (``django.core.mail.outbox``), except that the connection
    drops while a message to the unreachable domain is handed over: the sender cannot
    know whether it left."""

    def send_messages(self, messages) -> int:
        if any(to.endswith(f"@{UNREACHABLE}") for m in messages for to in m.recipients()):
            raise smtplib.SMTPServerDisconnected("connection closed during the handover")
        return super().send_messages(messages)


def rehearse() -> list[Check]:
    """Play every scenario in the current database; return the checks in order."""
    now = timezone.now()
    pending = AlertDelivery.objects.filter(status=AlertDelivery.Status.PENDING)
    if claimable(now).exists() or pending.exists():
        raise RehearsalRefused(
            "this database holds work a worker could take: rehearse in a database of its own"
        )
    with _surroundings():
        stage = Stage()
        checks = []
        for name, scenario in SCENARIOS:
            checks += _play(name, scenario, stage)
        found = list(violations())
        checks.append(Check("all", "invariants", not found, "; ".join(found) or "all hold"))
    return checks


@contextmanager
def _surroundings() -> Iterator[None]:
    """Files, artifacts and mail of the rehearsal's own, gone when it ends."""
    with (
        tempfile.TemporaryDirectory(prefix="oversight-rehearsal-") as root,
        override_settings(
            OVERSIGHT_WORKSPACE=Path(root) / "workspace",
            STORAGES={
                **settings.STORAGES,
                "artifacts": {
                    "BACKEND": "runs.artifact_store.DurableFileSystemStorage",
                    "OPTIONS": {"location": str(Path(root) / "artifacts")},
                },
            },
            MAILERS={"default": {"BACKEND": "runs.rehearsal.DroppingMailBackend"}},
            OVERSIGHT_EMAIL_ALLOWED_DOMAINS=[],
            OVERSIGHT_ALERT_EMAILS=[],
            OVERSIGHT_ALERT_WEBHOOK_URL="",
        ),
    ):
        saved = getattr(mail, "outbox", None)
        mail.outbox = []
        try:
            yield
        finally:
            if saved is None:
                del mail.outbox
            else:
                mail.outbox = saved


def _play(name: str, scenario: Callable, stage: "Stage") -> list[Check]:
    try:
        return list(scenario(stage))
    except Exception as exc:
        log.exception("rehearsal scenario %s stopped", name)
        return [Check(name, "ran", False, f"stopped: {type(exc).__name__}: {exc}")]


class Stage:
    """A project of the rehearsal's own: an owner (whose runs others must approve), two
    reviewers, an admin to alert, the agent's session and a worker."""

    def __init__(self) -> None:
        tag = secrets.token_hex(4)
        self.project = Project.objects.create(
            slug=f"rehearsal-{tag}", name=f"Rollback rehearsal {tag}"
        )
        self.owner = self._user(f"rehearsal-{tag}-owner")
        self.reviewers = [
            self._user(f"rehearsal-{tag}-reviewer-{n}", Role.REVIEWER) for n in (1, 2)
        ]
        self.admin = self._user(f"rehearsal-{tag}-admin", Role.ADMIN)
        self.session = open_session(
            project=self.project, owner=self.owner, agent=AGENT.label, title="Rollback rehearsal"
        )
        self.worker = Worker(name=f"rehearsal-{tag}")

    def _user(self, username: str, role: str = ""):
        user = get_user_model().objects.create_user(username, f"{username}@{DOMAIN}")
        if role:
            self.project.memberships.create(user=user, role=role_group(role))
        return user

    def approved(self, scenario: str, action: str, arguments: dict, **kwargs) -> Operation:
        """Propose in a run of its own, then approve as many reviewers as it needs."""
        run = start_run(session=self.session, goal=f"Rehearse the {scenario} path", actor=AGENT)
        op = propose_operation(
            run=run,
            call_id=scenario,
            action=action,
            arguments=arguments,
            base_version=run.version,
            actor=AGENT,
            **kwargs,
        )
        for reviewer in self.reviewers[: op.required_approvals]:
            decide(
                operation=op,
                reviewer=reviewer,
                kind=Decision.Kind.APPROVE,
                arguments_hash=op.arguments_hash,
                comment="rollback rehearsal",
            )
        op.refresh_from_db()
        if op.status != Status.APPROVED:
            raise RuntimeError(f"operation {op.pk} is {op.status} after its approvals")
        return op

    def execute(self, op: Operation, tamper: Callable[[Operation], None] | None = None) -> None:
        """One worker step; ``tamper`` changes the target right after the effect fired,
        before verification re-reads it (another writer, behind the worker's back), or
        fails that re-read."""

        def receiver(boundary: str, operation: Operation, **_kwargs) -> None:
            if tamper and boundary == EXECUTED and operation.pk == op.pk:
                tamper(operation)

        boundary_reached.connect(receiver, weak=False)
        try:
            self.worker.step()
        finally:
            boundary_reached.disconnect(receiver)
        op.refresh_from_db()


def outcome(scenario: str, op: Operation, expected: str) -> Check:
    """The operation's status, with the reason its last checkpoint gives."""
    last = op.checkpoints.order_by("-seq").first()
    passed = op.status == expected
    detail = (
        f"{op.status}: {last.reason}" if passed else f"{op.status}, not {expected}: {last.reason}"
    )
    return Check(scenario, "outcome", passed, detail)


def checkpoints(scenario: str, op: Operation, *ending: str) -> Check:
    """The operation's checkpoints from proposal to ``ending``, in order, and its run's
    hash chain intact."""
    rows = op.checkpoints.order_by("seq").values_list("event", "to_status")
    steps = [
        LABELS.get(event) or ("claimed" if to == Status.IN_FLIGHT else to) for event, to in rows
    ]
    expected = [
        "proposed",
        *["approval"] * (op.required_approvals - 1),
        "approved",
        "claimed",
        "intent",
        *ending,
    ]
    broken = verify_run_chain(Run.objects.get(pk=op.run_id))
    detail = " → ".join(steps)
    if steps != expected:
        detail += f" (expected {' → '.join(expected)})"
    detail += f"; chain broken at {broken}" if broken else "; chain intact"
    return Check(scenario, "checkpoints", steps == expected and broken is None, detail)


def _read(stage: Stage, path: str) -> str | None:
    target = resolve(path, stage.project)
    return target.read_text() if target.is_file() else None


def commit(stage: Stage) -> Iterator[Check]:
    path, content = "rehearsal/commit.md", "committed by the rehearsal\n"
    op = stage.approved(
        "commit",
        "file.write",
        {"path": path, "content": content, "expected_sha256": None},
        risk=Operation.Risk.MEDIUM,
        rollback_kind=Operation.RollbackKind.IN_BAND,
    )
    stage.execute(op)
    yield outcome("commit", op, Status.COMMITTED)
    found = _read(stage, path)
    yield Check(
        "commit",
        "effect",
        found == content,
        f"{path} written" if found == content else f"{path} holds {found!r}, not {content!r}",
    )
    yield checkpoints("commit", op, Status.COMMITTED)


def _unreadable(op: Operation) -> None:
    """Re-reading the file just written fails, as a failing disk does."""
    raise OSError(errno.EIO, os.strerror(errno.EIO), op.arguments["path"])


def in_band(stage: Stage) -> Iterator[Check]:
    path, before = "rehearsal/in-band.md", "the previous version\n"
    target = resolve(path, stage.project)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(before)
    kept = sha256_hex(before.encode())
    op = stage.approved(
        "in-band",
        "file.write",
        {"path": path, "content": "the new version\n", "expected_sha256": kept},
        risk=Operation.Risk.MEDIUM,
        rollback_kind=Operation.RollbackKind.IN_BAND,
    )
    with override_settings(OVERSIGHT_MAX_ATTEMPTS=1):
        stage.execute(op, _unreadable)
    yield outcome("in-band", op, Status.ROLLED_BACK)
    found = _read(stage, path)
    restored = found == before and (op.intent or {}).get("previous") == kept
    yield Check(
        "in-band",
        "effect",
        restored,
        f"{path} restored from artifact {kept[:12]}"
        if restored
        else f"{path} holds {found!r}, not its previous version {before!r}",
    )
    yield checkpoints("in-band", op, Status.VERIFY_FAILED, Status.ROLLED_BACK)


def _money(balances: dict[str, Decimal]) -> str:
    return ", ".join(f"{name} {balance}" for name, balance in sorted(balances.items()))


def compensating(stage: Stage) -> Iterator[Check]:
    opening = {"operating": Decimal("5000.00"), "supplier": Decimal("0.00")}
    for name, balance in opening.items():
        Account.objects.create(project=stage.project, name=name, balance=balance)
    op = stage.approved(
        "compensating",
        "ledger.transfer",
        {
            "from": "operating",
            "to": "supplier",
            "amount": "100.00",
            "require_balance_above": "1000",
        },
        risk=Operation.Risk.HIGH,  # Two different reviewers must approve.
        rollback_kind=Operation.RollbackKind.COMPENSATING,
    )
    entry = LedgerEntry.objects.filter(idempotency_key=op.idempotency_key)
    stage.execute(op, lambda _op: entry.update(amount=F("amount") + 1))
    yield outcome("compensating", op, Status.COMPENSATED)
    balances = dict(Account.objects.filter(project=stage.project).values_list("name", "balance"))
    reversal = LedgerEntry.objects.filter(
        idempotency_key=f"{op.idempotency_key}:compensate",
        debit__name="supplier",
        credit__name="operating",
        amount=Decimal("100.00"),
    )
    passed = balances == opening and reversal.exists()
    yield Check(
        "compensating",
        "effect",
        passed,
        f"balances back to {_money(balances)} by a compensating transfer"
        if passed
        else f"balances {_money(balances)}, opened at {_money(opening)}; "
        f"{'a' if reversal.exists() else 'no'} compensating transfer",
    )
    yield checkpoints("compensating", op, Status.VERIFY_FAILED, Status.COMPENSATED)


def out_of_band(stage: Stage) -> Iterator[Check]:
    op = stage.approved(
        "out-of-band",
        "email.send",
        {"to": [f"ops@{UNREACHABLE}"], "subject": "Weekly report", "body": "All green."},
        risk=Operation.Risk.MEDIUM,
        rollback_kind=Operation.RollbackKind.OUT_OF_BAND,
    )
    stage.execute(op)
    yield outcome("out-of-band", op, Status.ALERTED)
    yield checkpoints("out-of-band", op, Status.VERIFY_FAILED, Status.ALERTED)
    alert = Alert.objects.filter(operation=op).first()
    if alert is None:
        yield Check("out-of-band", "alert", False, "no alert was raised")
        return
    yield alert_left(op, alert)
    stage.worker.step()  # Deliveries go out at the worker's next step.
    yield deliveries(alert, stage.admin.email)


def alert_left(op: Operation, alert: Alert) -> Check:
    """Open, halting the run, and keeping what a person needs: the arguments, the
    intent, and a sent record that says the email may or may not have left."""
    run = Run.objects.get(pk=op.run_id)
    halted = (run.status, run.reason) == (Run.Status.WAITING, Run.Reason.RECONCILIATION)
    kept = alert.state_left == {"arguments": op.arguments, "intent": op.intent}
    record = SentEmail.objects.filter(idempotency_key=op.idempotency_key).first()
    sending = record is not None and record.status == SentEmail.Status.SENDING
    detail = (
        f"alert {alert.pk} {alert.status}; run {run.status}"
        + (f" ({run.reason})" if run.reason else "")
        + ("; state left kept" if kept else "; state left missing")
        + f"; sent record {record.status if record else 'missing'}"
    )
    return Check(
        "out-of-band",
        "alert",
        alert.status == Alert.Status.OPEN and halted and kept and sending,
        detail,
    )


def deliveries(alert: Alert, admin_email: str) -> Check:
    """Delivered in-app, and by email to the project's admin (its message in the outbox)."""
    channels = dict(alert.deliveries.values_list("channel", "status"))
    mailed = [m for m in mail.outbox if m.to == [admin_email] and f"Alert {alert.pk}:" in m.subject]
    delivered = AlertDelivery.Status.DELIVERED
    passed = (
        channels.get(AlertDelivery.Channel.IN_APP) == delivered
        and channels.get(AlertDelivery.Channel.EMAIL) == delivered
        and len(mailed) == 1
    )
    shown = ", ".join(f"{channel} {status}" for channel, status in sorted(channels.items()))
    return Check("out-of-band", "delivery", passed, f"{shown}; {len(mailed)} email to the admin")


SCENARIOS = [
    ("commit", commit),
    ("in-band", in_band),
    ("compensating", compensating),
    ("out-of-band", out_of_band),
]
