from django.core.management.base import BaseCommand

from runs.clock import db_now
from runs.services.decisions import expire_due_operations
from runs.services.requests import expire_due_requests


class Command(BaseCommand):
    help = (
        "Expire proposals nobody decided in time, approvals that lapsed and human requests "
        "nobody answered in time (fail closed)."
    )

    def handle(self, *args, **options) -> None:
        now = db_now()
        self.stdout.write(f"{expire_due_operations(now)} operation(s) expired")
        self.stdout.write(f"{expire_due_requests(now)} request(s) expired")
