from runs.management.operator import Listing
from runs.models import Alert


class Command(Listing):
    help = "List alerts not yet resolved (or all, with --all), newest first."
    columns = {
        "alert": "pk",
        "project": "project__slug",
        "run": "run_id",
        "operation": "operation_id",
        "status": "status",
        "created_at": "created_at",
        "summary": "summary",
    }

    def add_filters(self, parser) -> None:
        parser.add_argument("--all", action="store_true", help="Resolved ones too.")

    def listed(self, *, all, **options):
        return Alert.objects.all() if all else Alert.objects.unresolved()
