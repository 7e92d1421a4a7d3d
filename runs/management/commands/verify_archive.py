import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from runs.audit.archive import ArchiveError, anchor_problems, checked
from runs.durable_files import file_sha256


class Command(BaseCommand):
    help = (
        "Check a history archive (archive_history's zip) from its own content, without the "
        "database: the manifest's digest, and for every run its evidence's sha256, chain "
        "(every hash and link, head and length) and artifacts' bytes. With --anchored, also "
        "that this database's anchor has the file's sha256 and the same runs and heads. "
        "Exit 1 naming what does not hold."
    )
    requires_system_checks = []

    def add_arguments(self, parser) -> None:
        parser.add_argument("path", help="the history archive (.zip)")
        parser.add_argument(
            "--anchored",
            action="store_true",
            help="Also check the file against its anchor in the database.",
        )

    def handle(self, *args, path: str, anchored: bool, **options) -> None:
        try:
            manifest, problems = checked(Path(path))
        except ArchiveError as error:
            raise CommandError(str(error)) from None
        if anchored and not problems:
            problems = anchor_problems(Path(path), manifest)
        for problem in problems:
            self.stderr.write(f"broken: {problem}")
        if problems:
            sys.exit(1)
        runs = manifest["runs"]
        checkpoints = sum(listed["checkpoints"] for listed in runs)
        anchor = ", and matches its anchor" if anchored else ""
        self.stdout.write(
            f"archive {path} verifies: {len(runs)} run(s), {checkpoints} checkpoints, "
            f"sha256 {file_sha256(Path(path))}{anchor}"
        )
