import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from runs.actors import Actor
from runs.configuration.files import ConfigProblems, apply, load
from runs.management.operator import operator


class Command(BaseCommand):
    help = (
        "Make the projects, members and roles, approval policies, alert emails, Slack "
        "channels and webhooks a configuration file describes (docs/operating/"
        "configuration.md); --dry-run prints what would change and changes nothing."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", type=Path, help="The configuration file (YAML).")
        parser.add_argument("--dry-run", action="store_true", help="Print the changes only.")
        parser.add_argument(
            "--as",
            dest="acting_as",
            help="The superuser applying it, named in the admin checkpoints (required "
            "unless --dry-run).",
        )

    def handle(self, *args, file: Path, dry_run: bool, acting_as: str | None, **options) -> None:
        actor = None if dry_run else self._applier(acting_as)
        try:
            loaded = load(file)
        except ConfigProblems as problems:
            for line in problems.lines:
                self.stderr.write(line)
            self.stderr.write(f"{file}: {len(problems.lines)} problem(s); nothing applied")
            sys.exit(1)
        for change in loaded.changes:
            self.stdout.write(change.text)
        count = len(loaded.changes)
        if not count:
            self.stdout.write(f"{file}: nothing to change")
        elif dry_run:
            self.stdout.write(f"{file}: {count} change(s) (dry run: nothing applied)")
        else:
            try:
                shown = apply(loaded, actor)
            except ConfigProblems as problems:
                raise CommandError(problems.lines[0]) from None
            for note in shown:
                self.stdout.write(note)
            self.stdout.write(f"{file}: {count} change(s) applied (sha256 {loaded.sha256})")

    @staticmethod
    def _applier(username: str | None) -> Actor:
        if not username:
            raise CommandError("--as USER is required to apply (or --dry-run)")
        user = operator(username)
        if not user.is_superuser:
            raise CommandError(
                f"{username} is not a superuser: only a superuser applies a configuration"
            )
        return Actor.of_user(user)
