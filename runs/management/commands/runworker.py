from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from runs.engine.worker import Worker
from runs.logs import set_worker


class Command(BaseCommand):
    help = (
        "Execute approved operations (and deliver alerts, expire overdue decisions) until "
        "SIGTERM, which lets the operation in hand finish. --once drains what is ready."
    )
    # Django's checks ask the database what it supports: on SQLite, a worker starting
    # while a stopped process holds the database would wait there, before it could
    # watch for that process and end it (runs.engine.stalls). Deploys run the checks.
    requires_system_checks = []

    def add_arguments(self, parser) -> None:
        parser.add_argument("--once", action="store_true", help="Drain what is ready, then exit.")
        parser.add_argument("--name", default="", help="Worker name (default: host:pid).")
        parser.add_argument("--lease-seconds", type=float, default=None)
        parser.add_argument("--idle-seconds", type=float, default=0.5)

    def handle(self, *args, once: bool, name: str, lease_seconds, idle_seconds, **options):
        if lease_seconds is not None and lease_seconds <= 0:
            raise CommandError("--lease-seconds must be positive")
        lease = timedelta(seconds=lease_seconds) if lease_seconds else None
        worker = Worker(name=name, lease=lease)
        set_worker(worker.name)  # on every line this process logs
        if once:
            try:
                worker.drain()
            except DatabaseError as error:  # Busy past its timeout, or unreachable.
                raise CommandError(f"runworker --once stopped: the database: {error}") from None
            worker.sign_off()
        else:
            worker.run(idle_seconds=idle_seconds)
