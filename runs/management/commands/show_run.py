from django.core.management.base import BaseCommand

from runs.management.operator import add_output_arguments, found, write_rows
from runs.models import Run


class Command(BaseCommand):
    help = "Show a run: its status and goal, then its operations and its alerts."

    def add_arguments(self, parser) -> None:
        parser.add_argument("run", type=int)
        add_output_arguments(parser)

    def handle(self, *args, run, json, **options) -> None:
        shown = found(Run.objects.select_related("project"), run, "run")
        summary = {
            "run": shown.pk,
            "project": shown.project.slug,
            "status": shown.status,
            "reason": shown.reason or None,
            "unblock": shown.unblock or None,
            "outcome": shown.outcome or None,
            "goal": shown.goal,
        }
        operations = shown.operations.order_by("pk").values(
            "pk", "action", "status", "risk", "created_at", "gist"
        )
        alerts = shown.alerts.order_by("pk").values("pk", "status", "created_at", "summary")
        if json:
            write_rows(
                self.stdout,
                [{**summary, "operations": list(operations), "alerts": list(alerts)}],
                as_json=True,
            )
            return
        for name, value in summary.items():
            self.stdout.write(f"{name}: {value if value is not None else '-'}")
        for title, rows in (("operations", operations), ("alerts", alerts)):
            self.stdout.write(f"\n{title}:")
            if rows:
                write_rows(self.stdout, rows, as_json=False)
            else:
                self.stdout.write("none")
