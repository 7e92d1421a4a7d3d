from itertools import chain

from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Count, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from runs.actors import Actor
from runs.downloads import download
from runs.errors import OversightError
from runs.forms import ReasonForm, RunFilter
from runs.models import CheckpointArtifact, Operation, Run
from runs.permissions import has_project_perm
from runs.recovery import recovery_report
from runs.services.runs import cancel_run
from runs.views.access import load_run, member_projects

PAGE_SIZE = 50
# The run page's timeline shows the latest this many checkpoints (with the messages
# and operations of that stretch); the whole chain is in the audit trail.
TIMELINE_CHECKPOINTS = 100
TIMELINE_MESSAGES = 100
# Its tables of operations, requests and artifacts show the latest this many each.
TABLE_ROWS = 100

_pending_operations = (
    Operation.objects.filter(run=OuterRef("pk"), status=Operation.Status.PROPOSED)
    .order_by()
    .values("run")
    .annotate(n=Count("pk"))
    .values("n")
)


@require_GET
def run_list(request: HttpRequest) -> HttpResponse:
    projects = member_projects(request.user)
    filters = RunFilter(request.GET, projects=projects)
    runs = _filtered(Run.objects.filter(project__in=projects), filters)
    runs = runs.order_by("-created_at", "-pk")
    # The page's runs are chosen by their keys alone, then read with what the table
    # shows. Sorting whole rows made SQLite join and count every run of the user's
    # projects before it could take 50 (71 -> 9 ms at 50,000 runs); still one query.
    page = Paginator(runs.values_list("pk", flat=True), PAGE_SIZE).get_page(request.GET.get("page"))
    page.object_list = (
        runs.filter(pk__in=page.object_list)
        .select_related("project", "session__token")
        # A subquery, not a join and GROUP BY: only the page's runs are counted.
        .annotate(pending=Coalesce(Subquery(_pending_operations), 0))
    )
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "runs/run_list.html",
        {"filters": filters, "page": page, "query": query.urlencode()},
    )


def _filtered(runs, filters: RunFilter):
    if not filters.is_valid():
        return runs
    data = filters.cleaned_data
    lookups = {
        "status": "status",
        "reason": "reason",
        "project": "project__slug",
        "agent": "session__agent",
        "since": "created_at__date__gte",
        "until": "created_at__date__lte",
    }
    return runs.filter(**{lookups[name]: value for name, value in data.items() if value})


@require_GET
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = load_run(request.user, pk)
    return render(request, "runs/run_detail.html", _run_context(request, run))


def _run_context(request, run: Run, cancel_form: ReasonForm | None = None) -> dict:
    operations, earlier_operations = _latest(run.operations.all(), ("pk",), TABLE_ROWS)
    requests, earlier_requests = _latest(
        run.requests.select_related("answered_by"), ("pk",), TABLE_ROWS
    )
    artifacts, earlier_artifacts = _latest(
        CheckpointArtifact.objects.filter(checkpoint__run=run).select_related(
            "artifact", "checkpoint"
        ),
        ("checkpoint__seq", "pk"),
        TABLE_ROWS,
    )
    timeline, earlier, earlier_messages = _timeline(run)
    return {
        "run": run,
        "operations": operations,
        "earlier_operations": earlier_operations,
        "requests": requests,
        "earlier_requests": earlier_requests,
        "timeline": timeline,
        "earlier_checkpoints": earlier,
        "earlier_messages": earlier_messages,
        "artifacts": artifacts,
        "earlier_artifacts": earlier_artifacts,
        "table_rows": TABLE_ROWS,
        "timeline_messages": TIMELINE_MESSAGES,
        "recovery": recovery_report(run),
        "can_cancel": not run.is_terminal
        and has_project_perm(request.user, run.project, "cancel_run"),
        "cancel_form": cancel_form,
    }


def _latest(queryset, fields: tuple[str, ...], n: int) -> tuple[list, bool]:
    """The last ``n`` rows of ``queryset`` in the order of ``fields`` (which no two rows
    share), and whether earlier ones are left out (one row more is read to know,
    instead of counting them all)."""
    rows = list(queryset.order_by(*(f"-{field}" for field in fields))[: n + 1])
    return rows[:n][::-1], len(rows) > n


def _timeline(run: Run) -> tuple[list[tuple], int, bool]:
    """The run's story in order: its messages, its own checkpoints, and each operation
    at its proposal with its steps (the decisions, the execution, the verification:
    every checkpoint about it) under it, rather than scattered through the run. Only
    the latest ``TIMELINE_CHECKPOINTS`` checkpoints, and the operations and (at most
    ``TIMELINE_MESSAGES``) messages since the first of them; also returns how many earlier
    checkpoints are left out and whether earlier messages are."""
    recent = list(run.checkpoints.order_by("-seq")[:TIMELINE_CHECKPOINTS])[::-1]
    earlier = recent[0].seq - 1 if recent else 0
    since = recent[0].created_at if earlier else None
    # An operation proposed since then has its proposal among these checkpoints.
    operations = list(run.operations.filter(pk__in={c.operation_id for c in recent} - {None}))
    steps: dict[int, list] = {op.pk: [] for op in operations}
    own = []
    for checkpoint in recent:
        (steps[checkpoint.operation_id] if checkpoint.operation_id else own).append(checkpoint)
    for op in operations:
        op.steps = steps[op.pk]
    messages = run.messages.all() if since is None else run.messages.filter(created_at__gte=since)
    messages, earlier_messages = _latest(messages, ("seq",), TIMELINE_MESSAGES)
    story = sorted(
        chain(
            (("message", m.created_at, m) for m in messages),
            (("operation", op.created_at, op) for op in operations),
            (("checkpoint", c.created_at, c) for c in own),
        ),
        key=lambda entry: entry[1],
    )
    return story, earlier, earlier_messages


@require_http_methods(["GET", "POST"])
def cancel(request: HttpRequest, pk: int) -> HttpResponse:
    """Confirm, with a reason, then cancel the run and every operation not yet executed."""
    run = load_run(request.user, pk, "cancel_run")
    form = ReasonForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            cancel_run(
                run=run, actor=Actor.of_user(request.user), reason=form.cleaned_data["reason"]
            )
        except OversightError as error:
            form.add_error(None, str(error))
        else:
            messages.success(request, "The run is cancelled; nothing more will fire.")
            return redirect("run", pk=run.pk)
    status = 400 if request.method == "POST" else 200
    return render(request, "runs/run_cancel.html", {"run": run, "form": form}, status=status)


@require_GET
def artifact_download(request: HttpRequest, pk: int, ref: int) -> HttpResponseBase:
    run = load_run(request.user, pk)
    reference = get_object_or_404(
        CheckpointArtifact.objects.select_related("artifact"), pk=ref, checkpoint__run=run
    )
    return download(reference)
