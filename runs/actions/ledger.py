"""``ledger.transfer``: move money between two accounts of the in-database ledger.

Seed 003's example: "transfer $100 from A to B when balance > $1000". The precondition
re-reads the balance at commit time, and the transfer checks it again under the lock
of both accounts (taken in primary-key order, so transfers in opposite directions
queue instead of deadlocking); a conflict the database reports anyway is retried, never
taken for a refusal. The effect lives in Oversight's own database, so the worker
applies it and records the outcome in one transaction under its lease: exactly once.
Verification re-reads the entry of the key; the rollback is a compensating transfer,
made only if the forward entry exists, itself applied once.
"""

import logging
import random
import time
from decimal import Decimal
from typing import Annotated

from django.db import IntegrityError, OperationalError, transaction
from pydantic import BeforeValidator, Field, model_validator

from runs import statements
from runs.actions.base import (
    Action,
    Arguments,
    Context,
    Effect,
    NotApplied,
    NothingToRollBack,
    PreconditionFailed,
)
from runs.actions.previews import Balances, Together
from runs.amounts import PLAIN_AMOUNT, readable_amount
from runs.models import Account, LedgerEntry, Operation
from runs.statements import Prepared


def _plain(value):
    """An amount as a person reads it: 1250, "1250.00", never "1e3" (accepted, it was
    shown as written) nor " 12". A number in the JSON reaches here already a number."""
    if isinstance(value, str) and not PLAIN_AMOUNT.fullmatch(value):
        raise ValueError("an amount is a plain decimal such as 1250.00, with no exponent or spaces")
    return value


Money = Annotated[Decimal, BeforeValidator(_plain)]
# SQLSTATEs of a transaction the database aborted to resolve a conflict: retry it.
CONFLICTS = {"40001", "40P01"}  # serialization failure, deadlock detected
CONFLICT_RETRIES = 5
log = logging.getLogger(__name__)
# The ledger keeps amounts to the cent (``Account.balance``, ``LedgerEntry.amount``).
CENT = Decimal("0.01")


def _said(value: Decimal) -> str:
    """An amount of the ledger in a sentence people read: "1,250.00", with its cents even
    where the agent wrote 1250 (at most two places, so nothing is rounded). What is
    stored or sent to agents as a value keeps the plain decimal."""
    return readable_amount(value.quantize(CENT))


class TransferArguments(Arguments):
    source: str = Field(alias="from", min_length=1, max_length=100)
    target: str = Field(alias="to", min_length=1, max_length=100)
    amount: Money = Field(gt=0, max_digits=18, decimal_places=2)
    require_balance_above: Money | None = Field(default=None, ge=0, decimal_places=2)

    @model_validator(mode="after")
    def two_accounts(self) -> "TransferArguments":
        if self.source == self.target:
            raise ValueError("from and to must be two different accounts")
        return self


class LedgerTransfer(Action):
    name = "ledger.transfer"
    Arguments = TransferArguments
    rollback_kind = Operation.RollbackKind.COMPENSATING
    description = (
        "Move an amount between two accounts of Oversight's ledger; compensated by the "
        "reverse transfer."
    )
    checks = (
        "Both accounts exist and the source holds the amount (and more than "
        "require_balance_above, if given) when the transfer is made."
    )
    in_database = True

    def gist(self, args: TransferArguments) -> str:
        floor = args.require_balance_above
        kept = f", keeping {args.source} above {_said(floor)}" if floor is not None else ""
        return f"{args.source} → {args.target}: {_said(args.amount)}{kept}"

    def target(self, args: TransferArguments) -> str:
        """The account drawn from: transfers out of it add up (those into it only help)."""
        return f"account {args.source}"

    def together(self, pending: list[TransferArguments], ctx: Context) -> Together | None:
        """What the transfers out of one account would draw from it together, against what
        it holds now. Each is checked alone when it is made, so transfers that each fit
        may together overdraw it (those made first go through, the others are refused),
        or leave it at a floor that one of them requires."""
        source = pending[0].source
        project = ctx.operation.project_id
        balances = dict(_BALANCES.rows(project=project, source=source, target=source))
        if source not in balances:
            return None  # Each one's preview says that there is no such account.
        balance, drawn = balances[source], sum(args.amount for args in pending)
        if drawn > balance:
            return Together(_overdrawn(pending, source, balance, drawn), True)
        said = (
            f"Together these {len(pending)} transfers, this one included, would draw "
            f"{_said(drawn)} from {source}, which holds {_said(balance)} now: they would leave "
            f"{_said(balance - drawn)}."
        )
        # Made last, a transfer finds what the others left: enough for its amount, but
        # perhaps no more than its floor.
        left = balance - drawn
        floored = [
            a for a in pending if shortfall(left + a.amount, a.amount, a.require_balance_above)
        ]
        if not floored:
            return Together(said, False)
        return Together(
            f"{said} Made after the others, {len(floored)} of them would be refused: {source} "
            "would no longer be above the floor set in their require_balance_above.",
            True,
        )

    def describe(self, args: TransferArguments) -> dict[str, str]:
        floor = args.require_balance_above
        condition = f"{args.source} holds at least {_said(args.amount)}"
        if floor is not None:
            condition += f" and more than {_said(floor)}"
        return {
            "precondition": condition + " when the transfer is made.",
            "rollback": f"A compensating transfer of {_said(args.amount)} from {args.target} "
            f"back to {args.source}.",
        }

    def preview(self, args: TransferArguments, ctx: Context) -> Balances:
        accounts = _balances(ctx, args)
        floor = args.require_balance_above
        rows = [
            {"account": name, "before": str(accounts[name]), "after": str(accounts[name] + change)}
            for name, change in ((args.source, -args.amount), (args.target, args.amount))
            if name in accounts
        ]
        missing = [name for name in (args.source, args.target) if name not in accounts]
        if missing:
            why = f"there is no account {missing[0]!r} in this project"
        else:
            why = _unfunded(args.source, accounts[args.source], args.amount, floor)
        return Balances(rows, None if floor is None else str(floor), not why, why)

    def precondition(self, args: TransferArguments, ctx: Context) -> None:
        accounts = _balances(ctx, args)
        for name in (args.source, args.target):
            if name not in accounts:
                raise PreconditionFailed(f"there is no account {name!r} in this project")
        refusal = shortfall(accounts[args.source], args.amount, args.require_balance_above)
        if refusal:
            raise PreconditionFailed(f"{args.source} {refusal}")

    def execute(self, args: TransferArguments, key: str, ctx: Context) -> dict:
        entry = transfer(
            ctx, args.source, args.target, args.amount, key, floor=args.require_balance_above
        )
        return {"entry": entry.pk, "amount": str(entry.amount)}

    def verify(self, args: TransferArguments, key: str, ctx: Context) -> Effect:
        found = _ENTRY_MADE.rows(key=key)
        if not found:
            return Effect.ABSENT
        as_approved = found[0] == (args.amount, args.source, args.target)
        return Effect.APPLIED if as_approved else Effect.UNCERTAIN

    def compensate(self, args: TransferArguments, key: str, ctx: Context) -> None:
        """Move the amount back, only if the forward entry exists (read under its lock):
        compensating a transfer that never happened would create money."""
        if not LedgerEntry.objects.select_for_update().filter(idempotency_key=key).exists():
            raise NothingToRollBack("there is no ledger entry for this transfer")
        transfer(ctx, args.target, args.source, args.amount, f"{key}:compensate")


def _accounts(project: int, source: str, target: str):
    """The two accounts of a transfer in ``project``, those that exist."""
    return Account.objects.filter(project_id=project, name__in=[source, target])


# The reads of every transfer, compiled once (``runs.statements``).
_BALANCES = Prepared(
    lambda project, source, target: _accounts(project, source, target).values_list(
        "name", "balance"
    ),
    project=int,
    source=str,
    target=str,
)
_LOCKED = Prepared(
    lambda project, source, target: (
        _accounts(project, source, target).select_for_update().order_by("pk")
    ),
    project=int,
    source=str,
    target=str,
)
_ENTRY = Prepared(
    lambda key: LedgerEntry.objects.filter(idempotency_key=key).order_by("pk")[:1], key=str
)
_ENTRY_MADE = Prepared(
    lambda key: LedgerEntry.objects.filter(idempotency_key=key).values_list(
        "amount", "debit__name", "credit__name"
    )[:1],
    key=str,
)


def _balances(ctx: Context, args: TransferArguments) -> dict[str, Decimal]:
    """The balances of the transfer's accounts that exist in the project, by name."""
    project = ctx.operation.project_id
    return dict(_BALANCES.rows(project=project, source=args.source, target=args.target))


def _overdrawn(
    pending: list[TransferArguments], source: str, balance: Decimal, drawn: Decimal
) -> str:
    """Transfers drawing ``drawn`` together from ``source``, which holds less: said first,
    then by how much, and what becomes of them."""
    alone = all(not shortfall(balance, a.amount, a.require_balance_above) for a in pending)
    each = ", though each fits on its own" if alone else ""
    return (
        f"Together they would overdraw {source}{each}: these {len(pending)} transfers, this "
        f"one included, draw {_said(drawn)} from it, {_said(drawn - balance)} more than the "
        f"{_said(balance)} it holds now. Those carried out first go through; the others will "
        "be refused."
    )


def _unfunded(source: str, balance: Decimal, amount: Decimal, floor: Decimal | None) -> str:
    """Why the preview says the transfer could not be made now (empty if it could); an
    overdraft names the balance it would leave, which a reviewer would otherwise work
    out from the table."""
    why = shortfall(balance, amount, floor)
    if not why:
        return ""
    left = f": it would leave {source} at {_said(balance - amount)}" if balance < amount else ""
    return f"{source} {why}{left}"


def shortfall(balance: Decimal, amount: Decimal, floor: Decimal | None) -> str:
    """Why ``balance`` cannot fund ``amount`` (empty if it can), in words that a reviewer
    reads in the preview and in the reason the operation failed."""
    if balance < amount:
        return f"holds {_said(balance)}, less than the {_said(amount)} to transfer"
    if floor is not None and balance <= floor:
        return f"holds {_said(balance)}, not more than {_said(floor)}"
    return ""


def transfer(
    ctx: Context, source: str, target: str, amount: Decimal, key: str, *, floor=None
) -> LedgerEntry:
    """Apply the transfer once for ``key`` (a repeat returns the entry already made), or
    raise ``NotApplied``. A database conflict is retried with a little jitter."""
    attempt = 1
    while True:
        try:
            return _apply(ctx, source, target, amount, key, floor)
        except OperationalError as error:
            conflict = getattr(error.__cause__, "sqlstate", None) in CONFLICTS
            if not conflict or attempt == CONFLICT_RETRIES:
                raise
        time.sleep(random.uniform(0.01, 0.05) * attempt)
        attempt += 1


def _apply(ctx, source, target, amount, key, floor) -> LedgerEntry:
    existing = _ENTRY.first(key=key)
    if existing:
        return existing
    project = ctx.operation.project_id
    try:
        with transaction.atomic():
            accounts = {
                account.name: account
                for account in _LOCKED.instances(project=project, source=source, target=target)
            }
            if set(accounts) != {source, target}:
                raise NotApplied(f"the accounts {source!r} and {target!r} are not both here")
            debit, credit = accounts[source], accounts[target]
            refusal = shortfall(debit.balance, amount, floor)
            if refusal:
                raise NotApplied(f"{source} {refusal}")
            # Both rows are locked since they were read: their balances are as read.
            statements.update(Account, {"id": debit.pk}, {"balance": debit.balance - amount})
            statements.update(Account, {"id": credit.pk}, {"balance": credit.balance + amount})
            entry = LedgerEntry(
                project_id=project, idempotency_key=key, debit=debit, credit=credit, amount=amount
            )
            statements.insert(entry)
            return entry
    except IntegrityError as exc:
        # Either this key was applied concurrently (the effect exists exactly once) or
        # the ledger's own constraints refused the transfer.
        applied = _ENTRY.first(key=key)
        if applied is None:
            log.warning("ledger refused operation %s: %s", key, exc)
            raise NotApplied("the ledger's constraints refused the transfer") from None
        return applied
