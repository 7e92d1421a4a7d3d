import sys

from django.core.management.base import BaseCommand

from runs.invariants import violations


class Command(BaseCommand):
    help = (
        "Check the product's invariants (approvals, idempotency, checkpoint chains, "
        "artifacts, waiting reasons); print each violation and exit 1 if any."
    )

    def handle(self, *args, **options) -> None:
        found = 0
        for violation in violations():
            self.stderr.write(f"violation: {violation}")
            found += 1
        if found:
            self.stderr.write(f"{found} invariant violation(s)")
            sys.exit(1)
        self.stdout.write("all invariants hold")
