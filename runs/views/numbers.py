from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.safestring import SafeString
from django.views.decorators.http import require_GET

from runs.charts import bars
from runs.numbers import DAYS, Day, numbers_of, plain_duration
from runs.replica import behind, reads_replica
from runs.views.access import load_project


@require_GET
@reads_replica
def project_numbers(request: HttpRequest, slug: str) -> HttpResponse:
    """A project's numbers over the last days, drawn and tabled, for its admins; every
    duration in words (``plain_duration``, the template's ``duration`` filter)."""
    project = load_project(request.user, slug, "manage_project")
    numbers = numbers_of(project)
    days = [(f"{d.day:%b %-d}", d) for d in numbers.days]
    charts = {
        "waiting": bars(
            "Operations waiting at the end of each day", [(lb, d.waiting) for lb, d in days]
        ),
        "oldest": _timed("How long the oldest had waited", days, "oldest_seconds"),
        "p50": _timed("Median time to decision", days, "p50_seconds"),
        "p95": _timed("95th percentile time to decision", days, "p95_seconds"),
        "deciders": bars("Decisions per reviewer", numbers.deciders),
    }
    context = {
        "project": project,
        "numbers": numbers,
        "charts": charts,
        "period": DAYS,
        "lag": behind(),
    }
    return render(request, "runs/numbers.html", context)


def _timed(title: str, days: list[tuple[str, Day]], field: str) -> SafeString:
    """A chart of one of the days' durations (none: an empty bar), written in words."""
    return bars(title, [(label, getattr(day, field) or 0) for label, day in days], plain_duration)
