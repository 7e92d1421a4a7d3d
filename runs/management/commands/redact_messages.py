from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from runs.retention import redact_messages


class Command(BaseCommand):
    help = (
        "Redact the payloads of finished runs' messages older than the retention, keeping "
        "each payload's sha256; every affected run gets a messages.redacted checkpoint."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--older-than",
            type=int,
            metavar="DAYS",
            help="Retention in days (default: OVERSIGHT_MESSAGE_RETENTION_DAYS).",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would be redacted; change nothing."
        )

    def handle(self, *args, older_than: int | None, dry_run: bool, **options) -> None:
        days = settings.OVERSIGHT_MESSAGE_RETENTION_DAYS if older_than is None else older_than
        if days < 1:
            raise CommandError(f"--older-than must be at least 1 day, not {days}")
        done = redact_messages(days=days, dry_run=dry_run)
        verb = "would redact" if dry_run else "redacted"
        self.stdout.write(
            f"{verb} {done.messages} message payload(s) in {done.runs} run(s) "
            f"older than {days} days"
        )
