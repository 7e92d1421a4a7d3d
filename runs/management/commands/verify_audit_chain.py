import sys

from django.core.management.base import BaseCommand

from runs.chain import verify_all_chains
from runs.models import Checkpoint, Run


class Command(BaseCommand):
    help = (
        "Recompute every run's checkpoint hash chain; exit 1 naming the first broken link "
        "of each run whose chain does not verify (edited, removed or reordered checkpoints)."
    )

    def handle(self, *args, **options) -> None:
        broken = list(verify_all_chains())
        for link in broken:
            self.stderr.write(f"broken: {link}")
        if broken:
            self.stderr.write(f"{len(broken)} run(s) with a broken checkpoint chain")
            sys.exit(1)
        self.stdout.write(
            f"{Checkpoint.objects.count()} checkpoints in {Run.objects.count()} runs verify"
        )
