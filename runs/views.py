from django.contrib.auth.decorators import login_not_required
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from runs import machines
from runs.models import Operation, Run
from runs.permissions import projects_with_perm


@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """The signed-in user's projects with their runs by status and pending decisions."""
    projects = projects_with_perm(request.user, "view_run").annotate(
        pending=Count(
            "operations",
            filter=Q(operations__status=Operation.Status.PROPOSED),
            distinct=True,
        ),
        active=Count("runs", filter=~Q(runs__status__in=machines.RUN.terminal), distinct=True),
    )
    runs = (
        Run.objects.filter(project__in=projects_with_perm(request.user, "view_run"))
        .select_related("project", "session")
        .order_by("-created_at")[:20]
    )
    return render(request, "runs/home.html", {"projects": projects, "runs": runs})


@login_not_required
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ok": True})
