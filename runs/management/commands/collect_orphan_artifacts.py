from datetime import timedelta

from django.core.management.base import BaseCommand

from runs.services.artifacts import collect_orphan_artifacts


class Command(BaseCommand):
    help = "Remove artifact blobs that no checkpoint references (never a referenced one)."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--older-than-minutes",
            type=int,
            default=60,
            help="Grace period, so a blob whose checkpoint is being written is kept.",
        )

    def handle(self, *args, older_than_minutes: int, **options) -> None:
        removed = collect_orphan_artifacts(older_than=timedelta(minutes=older_than_minutes))
        for sha256 in removed:
            self.stdout.write(f"removed {sha256}")
        self.stdout.write(f"{len(removed)} orphan blob(s) removed")
