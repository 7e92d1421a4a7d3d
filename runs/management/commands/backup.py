from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from runs.backups import backup
from runs.errors import InvalidInput


class Command(BaseCommand):
    help = (
        "Back up the database and the artifacts it names into one archive (a new file), "
        "online: the web and the workers may keep writing."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("path", type=Path, help="the archive to write; must not exist")

    def handle(self, *args, path: Path, **options) -> None:
        try:
            manifest = backup(path)
        except InvalidInput as error:
            raise CommandError(str(error)) from None
        self.stdout.write(
            f"backed up to {path} ({path.stat().st_size} bytes: the {manifest['backend']} "
            f"database and {len(manifest['artifacts'])} artifact(s), integrity ok)"
        )
