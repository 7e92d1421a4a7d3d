import sys

from django.core.management.base import BaseCommand

from runs.chain import verify_admin_chain, verify_all_chains
from runs.models import AdminCheckpoint, Checkpoint, Run


class Command(BaseCommand):
    help = (
        "Recompute every run's checkpoint hash chain, and the installation's chain of admin "
        "checkpoints; exit 1 naming the first broken link of each chain that does not verify "
        "(edited, removed or reordered checkpoints)."
    )

    def handle(self, *args, **options) -> None:
        broken = list(verify_all_chains())
        for link in broken:
            self.stderr.write(f"broken: {link}")
        if broken:
            self.stderr.write(f"{len(broken)} run(s) with a broken checkpoint chain")
        if admin_broken := verify_admin_chain():
            self.stderr.write(f"broken: {admin_broken}")
        if broken or admin_broken:
            sys.exit(1)
        self.stdout.write(
            f"{Checkpoint.objects.count()} checkpoints in {Run.objects.count()} runs verify, "
            f"and {AdminCheckpoint.objects.count()} admin checkpoints"
        )
