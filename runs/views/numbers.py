from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from runs.charts import bars
from runs.numbers import DAYS, numbers_of
from runs.views.access import load_project


@require_GET
def project_numbers(request: HttpRequest, slug: str) -> HttpResponse:
    """A project's numbers over the last days, drawn and tabled, for its admins."""
    project = load_project(request.user, slug, "manage_project")
    numbers = numbers_of(project)
    days = [(f"{d.day:%b %-d}", d) for d in numbers.days]
    charts = {
        "waiting": bars(
            "Operations waiting at the end of each day", [(lb, d.waiting) for lb, d in days]
        ),
        "oldest": bars(
            "How long the oldest had waited, in hours",
            [(lb, d.oldest_hours) for lb, d in days],
            " h",
        ),
        "p50": bars(
            "Median time to decision, in minutes",
            [(lb, d.p50_minutes or 0) for lb, d in days],
            " min",
        ),
        "p95": bars(
            "95th percentile time to decision, in minutes",
            [(lb, d.p95_minutes or 0) for lb, d in days],
            " min",
        ),
        "deciders": bars("Decisions per reviewer", numbers.deciders),
    }
    context = {"project": project, "numbers": numbers, "charts": charts, "period": DAYS}
    return render(request, "runs/numbers.html", context)
