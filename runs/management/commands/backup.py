from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from runs.backups import backup
from runs.errors import InvalidInput


class Command(BaseCommand):
    help = "Back the SQLite database up online (web and workers may keep writing) and check it."

    def add_arguments(self, parser) -> None:
        parser.add_argument("path", type=Path)

    def handle(self, *args, path: Path, **options) -> None:
        try:
            backup(path)
        except InvalidInput as error:
            raise CommandError(str(error)) from None
        self.stdout.write(f"backed up to {path} ({path.stat().st_size} bytes, integrity ok)")
