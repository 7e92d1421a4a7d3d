from datetime import timedelta

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Max, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from runs import queue as waiting
from runs.forms import QueueFilter
from runs.models import Decision
from runs.permissions import own_interest, projects_with_perm

EXPIRING_SOON = timedelta(hours=1)
SECOND = "you approved it as it stands: a second reviewer must approve too"


# What a row shows, read and nothing else: a row is five models, and the fields it does
# not show (JSON decoded, dates parsed one by one on SQLite) were most of reading them.
_ROW = (
    "created_at",
    "expires_at",
    "run__goal",
    "run__session__agent",
    "run__session__owner",
    "run__session__token__name",
    "project__name",
)
_OPERATION_ROW = (
    *_ROW,
    "risk",
    "action",
    "gist",
    "executor",
    "summary",
    "required_approvals",
    "proposed_by_token__owner",
    "proposed_by_token__issued_by",
    "requeued_by",  # its id, for four eyes
)
_REQUEST_ROW = (
    *_ROW,
    "prompt",
    "kind",
    "choices",
    "asked_by_token__owner",
    "asked_by_token__issued_by",
)

# How many approvals that count each queued operation has (its two-person progress).
_approvals_counted = (
    Decision.objects.counted_approvals()
    .filter(operation=OuterRef("pk"))
    .order_by()
    .values("operation")
    .annotate(n=Count("pk"))
    .values("n")
)


@require_GET
def queue(request: HttpRequest) -> HttpResponse:
    """The live queue of what waits for a decision, oldest first: operations, and human
    requests (questions and sign-offs). htmx polls it with the version it shows; an
    unchanged queue answers 204 and nothing is swapped."""
    projects = projects_with_perm(request.user, "decide_operation")
    if not projects.exists():
        raise PermissionDenied("You are not a reviewer in any project.")
    filters = QueueFilter(request.GET, projects=projects)
    pending = _filtered(waiting.pending_for(request.user), filters)
    asking = _filtered_requests(waiting.open_requests_for(request.user), filters)
    approved = waiting.approved_by(request.user)
    summary = pending.aggregate(
        count=Count("pk"), approved=Count("pk", filter=Q(pk__in=approved)), latest=Max("updated_at")
    )
    asked = asking.aggregate(count=Count("pk"), latest=Max("updated_at"))
    version = f"{_version(summary)}/{_version(asked)}"
    count = summary["count"] - summary["approved"]  # What waits for them.
    if request.htmx and request.GET.get("since") == version:
        return HttpResponse(status=204)
    now = timezone.now()
    page = _page(filters)
    rows = _operation_rows(waiting.oldest(pending.exclude(pk__in=approved), page))
    # What they approved waits for a second reviewer: listed apart, after the rest (on
    # the first page, and read only if there is any).
    seconds = []
    if page == 1 and summary["approved"]:
        seconds = _operation_rows(waiting.oldest(pending.filter(pk__in=approved)))
    requests = (
        waiting.oldest(asking, page)
        .select_related("run__session__token", "project", "asked_by_token")
        .only(*_REQUEST_ROW)
    )
    sla = timedelta(minutes=settings.OVERSIGHT_REVIEW_SLA_MINUTES)
    query = request.GET.copy()
    query.pop("since", None)
    context = {
        "poll_url": f"{request.path}?{query.urlencode()}" if query else request.path,
        "filters": filters,
        # Each row: the operation, overdue, expiring soon, why it is not the viewer's
        # to decide (their run, an agent token of theirs or that they issued proposed
        # it, they approved it), if so, and whether they approved it: those come last,
        # waiting for someone else.
        "rows": [
            (
                op,
                now - op.created_at > sla,
                op.expires_at - now < EXPIRING_SOON,
                SECOND if second else own_interest(op, request.user),
                second,
            )
            for second, ops in ((False, rows), (True, seconds))
            for op in ops
        ],
        # The same for each open request.
        "request_rows": [
            (
                human,
                now - human.created_at > sla,
                human.expires_at - now < EXPIRING_SOON,
                own_interest(human, request.user),
            )
            for human in requests
        ],
        "count": count,
        "approved_count": summary["approved"],
        "request_count": asked["count"],
        "total": count + asked["count"],
        "limit": waiting.QUEUE_LIMIT,
        "first": (page - 1) * waiting.QUEUE_LIMIT + 1,
        "last": page * waiting.QUEUE_LIMIT,
        "page_urls": _page_urls(query, page, max(count, asked["count"])),
        "version": version,
        "sla_minutes": settings.OVERSIGHT_REVIEW_SLA_MINUTES,
    }
    if not _narrowed(filters):  # The navigation's count is this one: not counted twice.
        context["nav_pending"] = context["total"]
    template = "runs/approvals.html#queue" if request.htmx else "runs/approvals.html"
    return render(request, template, context)


def _operation_rows(chosen):
    """The operations ``chosen`` as their rows show them: with their run, agent and
    project, and the approvals they have so far."""
    return (
        chosen.select_related("run__session__token", "project", "proposed_by_token")
        .only(*_OPERATION_ROW)
        .annotate(approvals=Coalesce(Subquery(_approvals_counted), 0))
    )


def _page(filters: QueueFilter) -> int:
    return (filters.is_valid() and filters.cleaned_data["page"]) or 1


def _page_urls(query, page: int, longest: int) -> dict[str, str]:
    """The links to the pages before and after ``page`` (oldest first), keeping the
    filters, for as far as the longer section goes."""
    urls = {}
    for name, other in (("previous", page - 1), ("next", page + 1)):
        if other >= 1 and (other - 1) * waiting.QUEUE_LIMIT < longest:
            paged = query.copy()
            paged["page"] = other
            urls[name] = f"?{paged.urlencode()}"
    return urls


def _narrowed(filters: QueueFilter) -> bool:
    data = filters.cleaned_data if filters.is_valid() else {}
    return any(value for name, value in data.items() if name != "page")


def _version(summary: dict) -> str:
    latest = summary["latest"]
    return f"{summary['count']}-{latest.timestamp() if latest else 0}"


def _filtered_requests(requests, filters: QueueFilter):
    """Requests have a project, but no action or risk: filtering by those hides them."""
    if not filters.is_valid():
        return requests
    data = filters.cleaned_data
    if data["action"] or data["risk"]:
        return requests.none()
    return requests.filter(project__slug=data["project"]) if data["project"] else requests


def _filtered(pending, filters: QueueFilter):
    if not filters.is_valid():
        return pending
    data = filters.cleaned_data
    if data["project"]:
        pending = pending.filter(project__slug=data["project"])
    if data["action"]:
        pending = pending.filter(action=data["action"])
    if data["risk"]:
        pending = pending.filter(risk=data["risk"])
    return pending
