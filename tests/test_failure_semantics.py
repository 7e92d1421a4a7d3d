"""The engine's failure semantics (#10), in process: an effect that did not happen is
never rolled back (no money invented), a balance floor holds under the lock, a poison
operation ends instead of looping, and what can never succeed is refused at proposal.
The defects that need real processes (pauses, crashes, clocks, deadlocks) are in
test_failure_processes.py."""

import json
import urllib.request
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from runs.actions.base import Action, Arguments, Context, Effect, NothingToRollBack
from runs.actions.files import workspace_of
from runs.actions.ledger import LedgerTransfer
from runs.actions.registry import parse_arguments, registered
from runs.canonical import sha256_hex
from runs.engine.boundaries import INTENT
from runs.errors import InvalidInput
from runs.models import Account, Alert, LedgerEntry, Operation
from tests.conftest import http_arguments
from tests.helpers import decide_on, drained, invariants_hold

Status = Operation.Status


@pytest.fixture
def workspace(project):
    """The project's own workspace, where its file.write operations land."""
    return workspace_of(project)


def balances() -> dict[str, Decimal]:
    return dict(Account.objects.values_list("name", "balance"))


def set_balance(name: str, balance: str):
    def do(_op: Operation) -> None:
        Account.objects.filter(name=name).update(balance=Decimal(balance))

    return do


# --- An effect that did not happen is not rolled back ----------------------------------


def test_a_refused_transfer_fails_and_is_not_compensated(approved, accounts, at_boundary):
    """Seed 003's transfer, with A drained between the precondition and the transfer:
    the transfer is refused, and no compensation sends 100 from B back to A."""
    Account.objects.filter(name="B").update(balance=Decimal("1000.00"))
    op = approved("ledger")
    at_boundary(INTENT, set_balance("A", "50.00"))

    op = drained(op)

    assert op.status == Status.FAILED
    assert "A holds 50.00, less than the 100.00 to transfer" in op.status_reason
    assert op.result["effect"] == "absent"
    assert LedgerEntry.objects.count() == 0
    assert balances() == {"A": Decimal("50.00"), "B": Decimal("1000.00")}
    assert invariants_hold()


def test_the_balance_floor_is_checked_under_the_lock(approved, accounts, at_boundary):
    """A concurrent debit leaves A at 500 after the precondition saw 5000: the
    transfer must not take A below the approved floor of 1000."""
    op = approved("ledger")
    at_boundary(INTENT, set_balance("A", "500.00"))

    op = drained(op)

    assert op.status == Status.FAILED
    assert "A holds 500.00, not more than 1,000.00" in op.status_reason
    assert balances()["A"] == Decimal("500.00")


def test_a_call_the_target_refused_fails_and_is_not_compensated(approved, target):
    """The PUT is refused (404: no such resource): the compensating DELETE must not
    run, or it would delete the item someone else wrote."""
    put = urllib.request.Request(
        f"{target.base}/items/x", data=json.dumps({"colour": "red"}).encode(), method="PUT"
    )
    urllib.request.urlopen(put).close()
    arguments = http_arguments(target.base, compensate=True)
    arguments["url"] = f"{target.base}/nowhere/x"

    op = drained(approved("http", **arguments))

    assert op.status == Status.FAILED
    assert "refused: 404" in op.status_reason
    assert target.applied[f"{op.idempotency_key}:compensate"] == 0
    assert target.RequestHandlerClass.state.items["x"] == {"colour": "red"}


def test_a_file_changed_before_the_write_is_not_written_nor_restored(
    approved, workspace, at_boundary
):
    """A colleague edits the file after the precondition passed: the write is refused
    under the folder's lock, and the colleague's version is neither overwritten nor
    "restored" away."""
    path = workspace / "notes/today.md"
    path.parent.mkdir(parents=True)
    path.write_text("previous\n")
    op = approved("file", expected_sha256=sha256_hex(b"previous\n"))
    at_boundary(INTENT, lambda _op: path.write_text("the colleague's edit\n"))

    op = drained(op)

    assert op.status == Status.FAILED
    assert path.read_text() == "the colleague's edit\n"


def test_a_write_refused_by_the_target_with_412_is_not_applied(approved, target, at_boundary):
    """The item changed between the snapshot (its ETag) and the PUT: If-Match makes the
    target refuse the stale write instead of overwriting the change."""

    def change_item(_op: Operation) -> None:
        body = json.dumps({"colour": "blue"}).encode()
        urllib.request.urlopen(
            urllib.request.Request(f"{target.base}/items/x", data=body, method="PUT")
        ).close()

    urllib.request.urlopen(
        urllib.request.Request(
            f"{target.base}/items/x", data=json.dumps({"colour": "red"}).encode(), method="PUT"
        )
    ).close()
    at_boundary(INTENT, change_item)

    op = drained(approved("http"))

    assert op.status == Status.FAILED
    assert "refused: 412" in op.status_reason
    assert target.RequestHandlerClass.state.items["x"] == {"colour": "blue"}


def test_an_effect_gone_after_the_target_accepted_it_is_not_called_never_done(
    approved, workspace, at_boundary
):
    """The write landed, then someone removed the new file before verification: only a
    refusal says the effect did not happen. This is a verification failure, and the
    in-band rollback finds the folder already as it was."""
    op = approved("file")
    at_boundary("executed", lambda _op: (workspace / "notes/today.md").unlink())

    op = drained(op)

    assert op.status == Status.ROLLED_BACK
    assert op.result["effect"] == "uncertain"
    assert "the target accepted the call, but verification does not show" in op.status_reason


def test_compensation_needs_the_forward_entry(propose, accounts):
    """A rollback step that cannot see the forward effect does nothing: compensating a
    transfer that never happened would create money."""
    op = propose("pay", arguments={"from": "A", "to": "B", "amount": "100.00"})
    action = LedgerTransfer()
    args = parse_arguments(action, op.arguments)

    with pytest.raises(NothingToRollBack, match="no ledger entry"):
        action.compensate(args, op.idempotency_key, Context(operation=op))

    assert LedgerEntry.objects.count() == 0
    assert balances() == {"A": Decimal("5000.00"), "B": Decimal("0.00")}


# --- Poison operations end instead of looping ------------------------------------------


class Numbered(Arguments):
    n: int


class Poison(Action):
    """A custom action with a bug: its precondition always raises."""

    name = "test.poison"
    Arguments = Numbered
    rollback_kind = Operation.RollbackKind.OUT_OF_BAND

    def precondition(self, args, ctx) -> None:
        raise RuntimeError("a bug in a custom action")


class Unverifiable(Action):
    """A custom action whose target cannot be read back after it fired."""

    name = "test.unverifiable"
    Arguments = Numbered
    rollback_kind = Operation.RollbackKind.OUT_OF_BAND
    fired = 0

    def execute(self, args, key, ctx) -> dict:
        Unverifiable.fired += 1
        return {}

    def verify(self, args, key, ctx) -> Effect:
        raise ConnectionResetError("the target hung up")


@pytest.fixture
def custom_actions(settings):
    settings.OVERSIGHT_ACTIONS = [
        *settings.OVERSIGHT_ACTIONS,
        "tests.test_failure_semantics.Poison",
        "tests.test_failure_semantics.Unverifiable",
    ]
    registered.cache_clear()
    Unverifiable.fired = 0
    yield
    registered.cache_clear()


def lease_lapses(op: Operation) -> None:
    Operation.objects.filter(pk=op.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )


def test_a_poison_operation_ends_failed_after_its_attempts(
    custom_actions, propose, reviewer, settings
):
    op = propose("poison", action="test.poison", arguments={"n": 1}, rollback_kind="out_of_band")
    decide_on(op, reviewer)

    for attempt in range(1, settings.OVERSIGHT_MAX_ATTEMPTS):
        op = drained(op)  # Never raises: runworker --once survives it.
        assert (op.status, op.attempts) == (Status.IN_FLIGHT, attempt)
        assert op.checkpoints.filter(event="operation.attempt_failed").count() == attempt
        lease_lapses(op)
    op = drained(op)

    assert op.status == Status.FAILED
    assert op.status_reason == (
        f"gave up after {settings.OVERSIGHT_MAX_ATTEMPTS} attempts: "
        "an unexpected RuntimeError, logged on the server"
    )
    (message,) = op.run.messages.filter(kind="system")
    assert "was not executed: gave up after" in message.payload["text"]


def test_an_effect_that_cannot_be_verified_goes_to_a_person_after_its_attempts(
    custom_actions, propose, reviewer, settings
):
    op = propose(
        "blind", action="test.unverifiable", arguments={"n": 1}, rollback_kind="out_of_band"
    )
    decide_on(op, reviewer)

    for _ in range(settings.OVERSIGHT_MAX_ATTEMPTS):
        op = drained(op)
        lease_lapses(op)

    assert op.status == Status.ALERTED
    assert Unverifiable.fired == 1  # Each later attempt verified first; none fired again.
    assert "the connection to the target broke" in Alert.objects.get(operation=op).summary


# --- What can never succeed is refused at proposal -------------------------------------


@pytest.mark.parametrize(
    ("action", "arguments", "rollback_kind", "field"),
    [
        (
            "http.request",
            {"precondition": {"url": "{base}/items/a b"}},
            "compensating",
            "arguments.precondition.url",
        ),
        ("http.request", {"url": "{base}/items/x\r\nX-Injected: 1"}, "compensating", "url"),
        ("file.write", {"path": "notes/" + "n" * 300 + ".md"}, "in_band", "arguments.path"),
        ("file.write", {"path": "notes/.incoming-x"}, "in_band", "arguments.path"),
        ("ledger.transfer", {"to": "A"}, "compensating", "arguments"),
        ("email.send", {"subject": "Report\r\nBcc: all@example.com"}, "out_of_band", "subject"),
    ],
    ids=[
        "space-in-url",
        "crlf-in-url",
        "name-too-long",
        "temp-name",
        "same-account",
        "crlf-subject",
    ],
)
def test_a_proposal_that_can_never_succeed_is_refused(
    propose, target, action, arguments, rollback_kind, field
):
    base = {
        "http.request": http_arguments(target.base, compensate=True),
        "file.write": {"path": "notes/today.md", "content": "x", "expected_sha256": None},
        "ledger.transfer": {"from": "A", "to": "B", "amount": "1.00"},
        "email.send": {"to": ["ops@example.com"], "subject": "Report", "body": "Hi."},
    }[action]
    given = json.loads(json.dumps({**base, **arguments}).replace("{base}", target.base))
    if "precondition" in arguments:
        given["precondition"] = {**arguments["precondition"]}
        given["precondition"]["url"] = given["precondition"]["url"].replace("{base}", target.base)

    with pytest.raises(InvalidInput, match=field.split(".")[-1]):
        propose("never", action=action, arguments=given, rollback_kind=rollback_kind)
    assert not Operation.objects.exists()


# --- What killed writers leave behind --------------------------------------------------


def test_a_killed_writers_temporary_file_is_removed_by_the_next_write(approved, workspace):
    folder = workspace / "notes"
    folder.mkdir(parents=True)
    (folder / ".incoming-k1ll3d").write_bytes(b"half a fi")

    op = drained(approved("file"))

    assert op.status == Status.COMMITTED
    assert sorted(p.name for p in folder.iterdir()) == ["today.md"]


def test_a_workers_housekeeping_clears_temporary_files_in_quiet_folders(workspace):
    from runs.engine.worker import Worker

    quiet = workspace / "reports/2026"
    quiet.mkdir(parents=True)
    (quiet / ".incoming-k1ll3d").write_bytes(b"half a fi")
    (quiet / "kept.md").write_text("a real file\n")

    Worker(name="w1").step()

    assert sorted(p.name for p in quiet.iterdir()) == ["kept.md"]


def test_a_write_another_approved_write_built_on_is_applied_not_undone(
    approved, workspace, at_boundary
):
    """The first write landed but its worker could not record it; a second operation,
    approved against the first one's version, wrote on top. The first is verified
    applied (the second found it there), and its undo never discards the second."""
    path = workspace / "notes/today.md"
    first = approved("file")
    second = approved("file", content="hello\nand more\n", expected_sha256=sha256_hex(b"hello\n"))
    at_boundary("executed", lambda op: op.pk == first.pk and drained(second))

    first = drained(first)

    assert (first.status, Operation.objects.get(pk=second.pk).status) == ("committed", "committed")
    assert path.read_text() == "hello\nand more\n"


def test_an_undo_never_discards_another_approved_write(approved, workspace, at_boundary):
    """The first write is reverted behind its worker's back, and a second operation,
    approved against the old version, writes: the first cannot be confirmed, and
    restoring its previous version would discard the second's write. A person decides."""
    path = workspace / "notes/today.md"
    first = approved("file")
    second = approved("file", content="the second write\n")

    def revert_then_second(op: Operation) -> None:
        if op.pk == first.pk:
            path.unlink()
            drained(second)

    at_boundary("executed", revert_then_second)

    first = drained(first)

    assert first.status == Status.ALERTED
    assert "holds another approved operation's write" in first.status_reason
    assert path.read_text() == "the second write\n"


def test_a_write_is_not_taken_for_done_because_an_earlier_write_had_its_version(
    approved, workspace, at_boundary
):
    """v1 → v2 (committed), then an operation puts v1 back and is interrupted after its
    intent. That v2 was once approved against v1 says nothing about the revert: the
    takeover must find it absent and write it."""
    path = workspace / "notes/today.md"
    path.parent.mkdir(parents=True)
    path.write_text("v1\n")
    v1, v2 = sha256_hex(b"v1\n"), sha256_hex(b"v2\n")
    assert drained(approved("file", content="v2\n", expected_sha256=v1)).status == "committed"
    revert = approved("file", content="v1\n", expected_sha256=v2)

    def interrupted(op: Operation) -> None:
        if op.pk == revert.pk and op.attempts == 1:
            raise ConnectionResetError("the worker's connection dropped after the intent")

    at_boundary(INTENT, interrupted)
    revert = drained(revert)
    assert revert.status == Status.IN_FLIGHT
    lease_lapses(revert)

    revert = drained(revert)

    assert revert.status == Status.COMMITTED
    assert path.read_text() == "v1\n"
