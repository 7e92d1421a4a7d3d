"""A project's signed webhooks, for its admins: the endpoints (added here, the secret
shown once, as a token's is; paused and resumed; given a new secret) and the delivery
log, newest first, where a failed delivery is sent again."""

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from runs.forms import WebhookForm
from runs.models import WebhookDelivery, WebhookEndpoint
from runs.views.access import load_project

PERM = "manage_project"
# The delivery log shows this many, newest first: what an admin looks into is recent.
LOG_ROWS = 50


@require_http_methods(["GET", "POST"])
def webhook_list(request: HttpRequest, slug: str) -> HttpResponse:
    project = load_project(request.user, slug, PERM)
    form = WebhookForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            endpoint, secret = WebhookEndpoint.add(project=project, **form.cleaned_data)
        except ValidationError as error:
            for field, problems in error:
                form.add_error(field if field in form.fields else None, problems)
        else:
            return _page(request, project, WebhookForm(), endpoint, secret)
    return _page(request, project, form, status=400 if request.method == "POST" else 200)


def _page(request, project, form, endpoint=None, secret=None, status=200) -> HttpResponse:
    """The page; with ``secret``, ``endpoint``'s, on this answer only."""
    failed_only = request.GET.get("status") == WebhookDelivery.Status.FAILED
    log = WebhookDelivery.objects.filter(endpoint__project=project)
    if failed_only:
        log = log.filter(status=WebhookDelivery.Status.FAILED)
    context = {
        "project": project,
        "endpoints": project.webhooks.order_by("name"),
        "deliveries": log.select_related("endpoint", "event").order_by("-pk")[:LOG_ROWS],
        "failed_only": failed_only,
        "log_rows": LOG_ROWS,
        "form": form,
        "secret_of": endpoint,
        "secret": secret,
    }
    return render(request, "runs/webhooks.html", context, status=status)


@require_POST
def webhook_state(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """Pause or resume an endpoint (``active``: "off" or "on")."""
    project = load_project(request.user, slug, PERM)
    endpoint = get_object_or_404(WebhookEndpoint, pk=pk, project=project)
    wanted = request.POST.get("active")
    if wanted not in ("on", "off"):
        messages.error(request, "Choose Pause or Resume.")
    elif wanted == "on":
        endpoint.set_active(True)
        messages.success(request, f"{endpoint.name} is sent its events again.")
    else:
        endpoint.set_active(False)
        messages.success(request, f"{endpoint.name} is paused: nothing is recorded or sent for it.")
    return redirect("webhooks", slug=project.slug)


@require_POST
def webhook_secret(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """A new secret, shown on this answer only: the old one signs nothing more. The
    form names the endpoint it was shown for: another name (renamed since) is refused."""
    project = load_project(request.user, slug, PERM)
    endpoint = get_object_or_404(WebhookEndpoint, pk=pk, project=project)
    if request.POST.get("name") != endpoint.name:
        messages.error(request, "This endpoint changed since the page was shown: look again.")
        return redirect("webhooks", slug=project.slug)
    secret = endpoint.new_secret()
    endpoint.save(update_fields=["salt"])
    return _page(request, project, WebhookForm(), endpoint, secret)


@require_POST
def webhook_send_again(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    project = load_project(request.user, slug, PERM)
    delivery = get_object_or_404(WebhookDelivery, pk=pk, endpoint__project=project)
    if delivery.send_again():
        messages.success(request, f"Delivery {delivery.delivery_id} will be sent again at once.")
    else:
        messages.error(request, f"Delivery {delivery.delivery_id} has not failed.")
    return redirect("webhooks", slug=project.slug)
