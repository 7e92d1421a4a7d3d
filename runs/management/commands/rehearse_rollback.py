import sys
import time

from django.core.management.base import BaseCommand

from runs.rehearsal import rehearse
from runs.throwaway import throwaway_database


class Command(BaseCommand):
    help = (
        "Rehearse every rollback path end to end in a throwaway database: one operation "
        "commits, and one per rollback kind (in-band, compensating, out-of-band) fails "
        "its verification; print a PASS/FAIL line per check and exit 1 if any failed. "
        "Run it before each deploy."
    )

    def handle(self, *args, **options) -> None:
        started = time.monotonic()
        with throwaway_database("rehearsal") as name:
            self.stdout.write(f"Rehearsing rollbacks in a throwaway database: {name}")
            checks = rehearse()
        for check in checks:
            self.stdout.write(str(check))
        failed = [f"{check.scenario} {check.name}" for check in checks if not check.passed]
        if failed:
            self.stderr.write(f"rehearsal failed: {', '.join(failed)}")
            sys.exit(1)
        seconds = time.monotonic() - started
        self.stdout.write(
            self.style.SUCCESS(f"rehearsal passed: {len(checks)} checks in {seconds:.1f} s")
        )
