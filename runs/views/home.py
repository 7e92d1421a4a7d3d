import hmac

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.db.models import (
    Case,
    Count,
    Expression,
    IntegerField,
    OuterRef,
    QuerySet,
    Subquery,
    When,
)
from django.db.models.functions import Coalesce
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_safe
from prometheus_client import CONTENT_TYPE_LATEST

from oversight.sign_in import password_allowed
from runs import machines
from runs.context_processors import open_alerts, waiting_operations, waiting_requests
from runs.forms import PasswordChangeForm, PreferencesForm
from runs.health import health
from runs.metrics import exposition
from runs.middleware import remember
from runs.models import Preferences, Run, SlackIdentity
from runs.paused_lanes import operator_pauses
from runs.permissions import projects_with_perm
from runs.views.access import member_projects
from runs.views.tokens import tokens_to_accept


@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """The signed-in user's projects with their active runs and what waits in each, as
    the navigation counts it (``runs.context_processors``): decisions where they decide,
    open alerts where they may see alerts. The navigation's badges on this page are the
    table's totals, so the two cannot disagree, and nothing is counted twice. Staff see
    the operators' pauses of the workers above it."""
    user = request.user
    projects = list(
        member_projects(user).annotate(
            active=_per_project(Run.objects.exclude(status__in=machines.RUN.terminal)),
            pending=_where(
                user,
                "decide_operation",
                _per_project(waiting_operations(user)) + _per_project(waiting_requests()),
            ),
            open_alerts=_where(user, "view_alert", _per_project(open_alerts())),
        )
    )
    runs = (
        Run.objects.filter(project__in=member_projects(user))
        .select_related("project", "session__token")
        .order_by("-created_at")[:20]
    )
    managed = set(projects_with_perm(user, "manage_project").values_list("pk", flat=True))
    return render(
        request,
        "runs/home.html",
        {
            "projects": projects,
            "runs": runs,
            "managed": managed,
            "nav_pending": sum(p.pending for p in projects if p.pending is not None),
            "nav_alerts": sum(p.open_alerts for p in projects if p.open_alerts is not None),
            # Staff are told why nothing approved is carried out (one query, theirs only).
            "pauses": operator_pauses() if user.is_staff else [],
        },
    )


def _per_project(rows: QuerySet) -> Coalesce:
    """How many of ``rows`` belong to the outer query's project: a subquery each, so
    that counting several kinds does not multiply their joins."""
    counted = (
        rows.filter(project=OuterRef("pk"))
        .order_by()
        .values("project")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(counted), 0)


def _where(user, perm: str, count: Expression) -> Case:
    """``count`` in the projects where ``user`` has ``perm``; None elsewhere (shown as a
    dash: the navigation does not count it for them)."""
    allowed = projects_with_perm(user, perm).values("pk")
    return Case(When(pk__in=allowed, then=count), default=None, output_field=IntegerField())


@require_http_methods(["GET", "POST"])
def preferences(request: HttpRequest) -> HttpResponse:
    form = PreferencesForm(request.POST or None, instance=Preferences.of(request.user))
    if request.method == "POST" and form.is_valid():
        form.save()
        remember(request, form.instance)
        messages.success(request, "Preferences saved.")
        return redirect("preferences")
    return preferences_page(request, form, status=400 if request.method == "POST" else 200)


def preferences_page(request, form=None, *, slack_code: str = "", status: int = 200):
    """The account page; with ``slack_code``, a one-time code to type into Slack, shown
    on this answer only."""
    context = {
        "form": form or PreferencesForm(instance=Preferences.of(request.user)),
        "tokens_to_accept": tokens_to_accept(request.user),
        "slack_identity": SlackIdentity.objects.filter(user=request.user).first(),
        "slack_on": bool(settings.OVERSIGHT_SLACK_BOT_TOKEN),
        "slack_code": slack_code,
    }
    return render(request, "runs/preferences.html", context, status=status)


@login_not_required
@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    """Unauthenticated, for monitors (and, with ``?scope=web``, load balancers): 200 when
    every check passes, else 503: degraded (an open alert reached no one) as much as
    unhealthy, so that a monitor reading only the status code notices; the body says
    which, with each check's result (see ``runs.health``)."""
    answer = health(scope="web" if request.GET.get("scope") == "web" else "all")
    response = JsonResponse(answer, status=200 if answer["ok"] else 503)
    # Unhealthy is the monitor's news, not a server error: no error line per probe.
    response._has_been_logged = True
    return response


@login_not_required
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """For Prometheus, with ``Authorization: Bearer <OVERSIGHT_METRICS_TOKEN>``; no
    session, no cookie. Without the setting there is no such page (404)."""
    if not settings.OVERSIGHT_METRICS_TOKEN:
        raise Http404
    if not _has_metrics_token(request):
        response = HttpResponse(
            "A bearer token is needed.\n", status=401, content_type="text/plain"
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)


def _has_metrics_token(request: HttpRequest) -> bool:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    expected = settings.OVERSIGHT_METRICS_TOKEN.encode()
    # In constant time, so the answer's timing tells nothing of the token.
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), expected)


class PasswordChange(auth_views.PasswordChangeView):
    """Django's page, with the current password checked under the sign-in throttle."""

    form_class = PasswordChangeForm

    def dispatch(self, request, *args, **kwargs):
        # An account that signs in through the provider has its password kept there.
        user = request.user
        if user.is_authenticated and not (user.has_usable_password() and password_allowed(user)):
            messages.info(request, "Your sign-in provider keeps your password: change it there.")
            return redirect("preferences")
        return super().dispatch(request, *args, **kwargs)

    def get_form_kwargs(self) -> dict:
        return {**super().get_form_kwargs(), "request": self.request}
