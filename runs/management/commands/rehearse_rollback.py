import os
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.core.management.base import BaseCommand
from django.db import connection

from runs.rehearsal import rehearse


@contextmanager
def throwaway_database() -> Iterator[str]:
    """A fresh, migrated database that is the default connection for the duration and
    is dropped afterwards. Django's test-database machinery creates it under a name of
    our own (a file in a temporary folder on SQLite; a new database on PostgreSQL,
    which needs the CREATEDB privilege); nothing is written to the real database."""
    settings_dict = connection.settings_dict
    real_name, real_test = settings_dict["NAME"], settings_dict["TEST"]
    folder = tempfile.mkdtemp(prefix="oversight-rehearsal-")
    name = f"oversight_rehearsal_{os.getpid()}_{secrets.token_hex(3)}"
    if connection.vendor == "sqlite":
        name = str(Path(folder) / "rehearsal.sqlite3")
    settings_dict["TEST"] = {**real_test, "NAME": name}
    try:
        connection.creation.create_test_db(verbosity=0, autoclobber=True)
        yield name
    finally:
        if settings_dict["NAME"] == name:  # Created, perhaps only half migrated.
            connection.creation.destroy_test_db(real_name, verbosity=0)
        settings_dict["TEST"] = real_test
        shutil.rmtree(folder, ignore_errors=True)


class Command(BaseCommand):
    help = (
        "Rehearse every rollback path end to end in a throwaway database: one operation "
        "commits, and one per rollback kind (in-band, compensating, out-of-band) fails "
        "its verification; print a PASS/FAIL line per check and exit 1 if any failed. "
        "Run it before each deploy."
    )

    def handle(self, *args, **options) -> None:
        started = time.monotonic()
        with throwaway_database() as name:
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
