from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from runs.errors import OversightError
from runs.forms import ResolveForm
from runs.models import Alert, Checkpoint, Operation
from runs.permissions import projects_with_perm
from runs.services.alerts import acknowledge_alert, resolve_alert, send_alert_again
from runs.views.access import load_alert

LIMIT = 200


@require_GET
def alert_list(request: HttpRequest) -> HttpResponse:
    alerts = list(
        Alert.objects.unresolved()
        .filter(project__in=projects_with_perm(request.user, "view_alert"))
        .select_related("project", "run", "operation", "acknowledged_by")
        .prefetch_related("deliveries")
        .order_by("-created_at", "-pk")[:LIMIT]
    )
    seen = _verifications([alert.operation_id for alert in alerts if alert.operation_id])
    for alert in alerts:
        alert.verification = seen.get(alert.operation_id)
    resolvable = set(projects_with_perm(request.user, "resolve_alert").values_list("pk", flat=True))
    return render(
        request,
        "runs/alerts.html",
        {"alerts": alerts, "resolvable": resolvable, "resolve_form": ResolveForm()},
    )


def _verifications(operation_ids: list[int]) -> dict[int, dict]:
    """What verification saw after each operation's effect, as its checkpoint moving
    the operation to verify_failed recorded it: why the effect could not be confirmed
    (an alerted operation always went through one). Only that verdict is kept: no
    action records what it read at the target. One query for the page, none without
    operations."""
    if not operation_ids:
        return {}
    found = (
        Checkpoint.objects.filter(
            operation_id__in=operation_ids,
            event="operation.status",
            to_status=Operation.Status.VERIFY_FAILED,
        )
        .order_by("seq")
        .values("pk", "operation_id", "reason", "created_at")
    )
    return {row["operation_id"]: row for row in found}  # The last one of each wins.


@require_POST
def acknowledge(request: HttpRequest, pk: int) -> HttpResponse:
    alert = load_alert(request.user, pk, "resolve_alert")
    try:
        acknowledge_alert(alert=alert, user=request.user)
    except OversightError as error:
        messages.error(request, str(error))
    else:
        messages.success(request, f"Alert {alert.pk} acknowledged.")
    return redirect("alerts")


@require_POST
def send_again(request: HttpRequest, pk: int) -> HttpResponse:
    """Deliveries not made yet go out now (the channel is back, or was fixed), and are
    retried for another span if they fail again."""
    alert = load_alert(request.user, pk, "resolve_alert")
    try:
        count = send_alert_again(alert=alert, user=request.user)
    except OversightError as error:
        messages.error(request, str(error))
    else:
        deliveries = f"{count} deliver{'y' if count == 1 else 'ies'}"
        messages.success(request, f"Alert {alert.pk}: {deliveries} will be sent again at once.")
    return redirect("alerts")


@require_POST
def resolve(request: HttpRequest, pk: int) -> HttpResponse:
    alert = load_alert(request.user, pk, "resolve_alert")
    form = ResolveForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Alert {alert.pk}: a resolution note is required.")
        return redirect("alerts")
    try:
        resolve_alert(alert=alert, user=request.user, note=form.cleaned_data["note"])
    except OversightError as error:
        messages.error(request, str(error))
    else:
        messages.success(request, f"Alert {alert.pk} resolved; its run is released.")
    return redirect("alerts")
