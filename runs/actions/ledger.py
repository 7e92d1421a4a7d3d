"""``ledger.transfer``: move money between two accounts of the in-database ledger.

Seed 003's example: "transfer $100 from A to B when balance > $1000". The precondition
re-reads the balance at commit time; the transfer applies once per idempotency key
(a unique ledger entry); verification re-reads the entry and both balances' movement;
the rollback is a compensating transfer, itself applied once.
"""

from decimal import Decimal

from django.db import IntegrityError, transaction
from django.db.models import F
from pydantic import Field

from runs.actions.base import Action, Arguments, Context, ExecutionFailed, PreconditionFailed
from runs.models import Account, LedgerEntry, Operation

Money = Decimal


class TransferArguments(Arguments):
    source: str = Field(alias="from", min_length=1, max_length=100)
    target: str = Field(alias="to", min_length=1, max_length=100)
    amount: Money = Field(gt=0, max_digits=18, decimal_places=2)
    require_balance_above: Money | None = Field(default=None, ge=0, decimal_places=2)


class LedgerTransfer(Action):
    name = "ledger.transfer"
    Arguments = TransferArguments
    rollback_kind = Operation.RollbackKind.COMPENSATING

    def describe(self, args: TransferArguments) -> dict[str, str]:
        floor = args.require_balance_above
        condition = f"{args.source} holds at least {args.amount}"
        if floor is not None:
            condition += f" and more than {floor}"
        return {
            "precondition": condition + " when the transfer is made.",
            "rollback": f"A compensating transfer of {args.amount} from {args.target} back to "
            f"{args.source}.",
        }

    def precondition(self, args: TransferArguments, ctx: Context) -> None:
        source = self._account(ctx, args.source)
        self._account(ctx, args.target)
        if source.balance < args.amount:
            raise PreconditionFailed(
                f"{args.source} holds {source.balance}, less than the {args.amount} to transfer"
            )
        if args.require_balance_above is not None and source.balance <= args.require_balance_above:
            raise PreconditionFailed(
                f"{args.source} holds {source.balance}, not more than {args.require_balance_above}"
            )

    def execute(self, args: TransferArguments, key: str, ctx: Context) -> dict:
        entry = self._transfer(ctx, args.source, args.target, args.amount, key)
        return {"entry": entry.pk, "amount": str(entry.amount)}

    def verify(self, args: TransferArguments, key: str, ctx: Context) -> bool:
        entry = LedgerEntry.objects.filter(idempotency_key=key).select_related("debit", "credit")
        entry = entry.first()
        return (
            entry is not None
            and entry.amount == args.amount
            and (entry.debit.name, entry.credit.name) == (args.source, args.target)
        )

    def compensate(self, args: TransferArguments, key: str, ctx: Context) -> None:
        self._transfer(ctx, args.target, args.source, args.amount, f"{key}:compensate")

    def _account(self, ctx: Context, name: str) -> Account:
        try:
            return Account.objects.get(project=ctx.project, name=name)
        except Account.DoesNotExist:
            raise PreconditionFailed(f"there is no account {name!r} in this project") from None

    def _transfer(self, ctx, source: str, target: str, amount: Decimal, key: str) -> LedgerEntry:
        """Apply the transfer once for ``key``; a repeat returns the entry already made."""
        existing = LedgerEntry.objects.filter(idempotency_key=key).first()
        if existing:
            return existing
        try:
            with transaction.atomic():
                debit = Account.objects.select_for_update().get(project=ctx.project, name=source)
                credit = Account.objects.get(project=ctx.project, name=target)
                if debit.balance < amount:
                    raise ExecutionFailed(f"{source} holds {debit.balance}, less than {amount}")
                Account.objects.filter(pk=debit.pk).update(balance=F("balance") - amount)
                Account.objects.filter(pk=credit.pk).update(balance=F("balance") + amount)
                return LedgerEntry.objects.create(
                    project=ctx.project,
                    idempotency_key=key,
                    debit=debit,
                    credit=credit,
                    amount=amount,
                )
        except IntegrityError as exc:
            # Either another executor applied this key first (the effect exists exactly
            # once) or the ledger's own constraints refused the transfer.
            applied = LedgerEntry.objects.filter(idempotency_key=key).first()
            if applied is None:
                raise ExecutionFailed(f"the ledger refused the transfer: {exc}") from None
            return applied
