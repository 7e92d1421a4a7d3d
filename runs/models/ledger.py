from django.db import models

from runs.models.projects import Project


class Account(models.Model):
    """An account of the in-database ledger that the ``ledger.transfer`` action moves
    money between (seed 003: "transfer $100 from A to B when balance > $1000")."""

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="accounts")
    name = models.CharField(max_length=100)
    balance = models.DecimalField(max_digits=18, decimal_places=2, default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="account_unique_name"),
            # The last line of defence against an overdraft: even a transfer whose
            # precondition held when checked cannot take an account below zero.
            models.CheckConstraint(condition=models.Q(balance__gte=0), name="account_no_overdraft"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.balance})"


class LedgerEntry(models.Model):
    """One applied transfer. The unique idempotency key makes a transfer apply once."""

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="ledger_entries")
    idempotency_key = models.CharField(max_length=100, unique=True)
    debit = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="debits")
    credit = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="credits")
    amount = models.DecimalField(max_digits=18, decimal_places=2)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "ledger entries"
        constraints = [
            models.CheckConstraint(condition=models.Q(amount__gt=0), name="entry_amount_positive"),
            models.CheckConstraint(
                condition=~models.Q(debit=models.F("credit")), name="entry_distinct_accounts"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.amount} {self.debit.name} → {self.credit.name}"
