from django.core.management.base import BaseCommand

from runs.management.operator import add_output_arguments, write_rows
from runs.models import Alert


class Command(BaseCommand):
    help = "List alerts not yet resolved (or all, with --all), newest first."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--project", help="A project's slug.")
        parser.add_argument("--all", action="store_true", help="Resolved ones too.")
        parser.add_argument("--limit", type=int, default=50, help="At most this many (50).")
        add_output_arguments(parser)

    def handle(self, *args, project, all, limit, json, **options) -> None:
        alerts = Alert.objects.order_by("-created_at", "-pk")
        if not all:
            alerts = alerts.unresolved()
        if project:
            alerts = alerts.filter(project__slug=project)
        fields = ["pk", "project__slug", "run_id", "operation_id", "status", "created_at"]
        rows = alerts.values(*fields, "summary")[: max(limit, 0)]
        write_rows(self.stdout, (_named(row) for row in rows), json)


def _named(row: dict) -> dict:
    return {
        "alert": row["pk"],
        "project": row["project__slug"],
        "run": row["run_id"],
        "operation": row["operation_id"],
        "status": row["status"],
        "created_at": row["created_at"],
        "summary": row["summary"],
    }
