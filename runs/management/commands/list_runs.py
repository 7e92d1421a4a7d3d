from runs.management.operator import Listing
from runs.models import Run


class Command(Listing):
    help = "List runs, newest first: all, or a project's, or those in some statuses."
    columns = {
        "run": "pk",
        "project": "project__slug",
        "status": "status",
        "reason": "reason",
        "created_at": "created_at",
        "goal": "goal",
    }

    def add_filters(self, parser) -> None:
        parser.add_argument(
            "--status", action="append", choices=Run.Status.values, help="Repeatable."
        )

    def listed(self, *, status, **options):
        runs = Run.objects.all()
        return runs.filter(status__in=status) if status else runs
