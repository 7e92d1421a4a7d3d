import sys
from pathlib import Path

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from runs.backups import restore
from runs.errors import InvalidInput


class Command(BaseCommand):
    help = "Restore the SQLite database from a backup, then check every invariant on it."

    def add_arguments(self, parser) -> None:
        parser.add_argument("path", type=Path)

    def handle(self, *args, path: Path, **options) -> None:
        try:
            restore(path)
        except InvalidInput as error:
            raise CommandError(str(error)) from None
        try:
            call_command("check_invariants", stdout=self.stdout, stderr=self.stderr)
        except SystemExit:
            self.stderr.write(f"restored from {path}, but the invariants do not hold")
            sys.exit(1)
        self.stdout.write(f"restored from {path}")
