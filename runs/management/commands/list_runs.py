from django.core.management.base import BaseCommand

from runs.management.operator import add_output_arguments, write_rows
from runs.models import Run


class Command(BaseCommand):
    help = "List runs, newest first: all, or a project's, or those in some statuses."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--project", help="A project's slug.")
        parser.add_argument(
            "--status", action="append", choices=Run.Status.values, help="Repeatable."
        )
        parser.add_argument("--limit", type=int, default=50, help="At most this many (50).")
        add_output_arguments(parser)

    def handle(self, *args, project, status, limit, json, **options) -> None:
        runs = Run.objects.order_by("-created_at", "-pk")
        if project:
            runs = runs.filter(project__slug=project)
        if status:
            runs = runs.filter(status__in=status)
        fields = ["pk", "project__slug", "status", "reason", "created_at", "goal"]
        rows = runs.values(*fields)[: max(limit, 0)]
        write_rows(self.stdout, (_named(row) for row in rows), json)


def _named(row: dict) -> dict:
    return {
        "run": row["pk"],
        "project": row["project__slug"],
        "status": row["status"],
        "reason": row["reason"] or None,
        "created_at": row["created_at"],
        "goal": row["goal"],
    }
