from django.core.management.base import BaseCommand

from runs.services.decisions import expire_due_operations


class Command(BaseCommand):
    help = "Expire proposals nobody decided in time and approvals that lapsed (fail closed)."

    def handle(self, *args, **options) -> None:
        self.stdout.write(f"{expire_due_operations()} operation(s) expired")
