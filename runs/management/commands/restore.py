import sys
from pathlib import Path

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from runs.backups import restore
from runs.errors import InvalidInput


class Command(BaseCommand):
    help = (
        "Restore the database and the artifacts from an archive of manage.py backup (checked "
        "whole first), hold the workers until an admin resumes them, and check every invariant."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("path", type=Path)
        parser.add_argument(
            "--force",
            action="store_true",
            help="restore even though workers look alive (their heartbeat is fresh)",
        )

    def handle(self, *args, path: Path, force: bool, **options) -> None:
        try:
            taken_over = restore(path, force=force)
        except InvalidInput as error:
            raise CommandError(str(error)) from None
        try:
            call_command("check_invariants", stdout=self.stdout, stderr=self.stderr)
        except SystemExit:
            self.stderr.write(f"restored from {path}, but the invariants do not hold")
            sys.exit(1)
        self.stdout.write(
            f"restored from {path}; {taken_over} operation(s) approved or in flight then will "
            "be verified before anything fires. The workers are held: check, then run "
            "manage.py resume_workers --as ADMIN"
        )
