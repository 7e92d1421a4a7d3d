from runs.management.operator import Listing
from runs.models import Operation


class Command(Listing):
    help = "List operations, newest first: all, or a project's, or in some statuses."
    columns = {
        "operation": "pk",
        "run": "run_id",
        "action": "action",
        "status": "status",
        "risk": "risk",
        "created_at": "created_at",
        "gist": "gist",
    }

    def add_filters(self, parser) -> None:
        parser.add_argument(
            "--status", action="append", choices=Operation.Status.values, help="Repeatable."
        )

    def listed(self, *, status, **options):
        operations = Operation.objects.all()
        return operations.filter(status__in=status) if status else operations
