"""Requeuing an operation after a fix, from its page (``runs.services.requeues``): a
page that says what will happen and asks what was fixed, as cancelling a run does."""

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from runs.errors import OversightError
from runs.forms import ReasonForm
from runs.permissions import has_project_perm
from runs.services.requeues import (
    REQUEUABLE,
    requeue_operation,
    requeued_as,
    why_not_requeuable,
)
from runs.views.access import load_operation


def requeue(request: HttpRequest, pk: int) -> HttpResponse:
    operation = load_operation(request.user, pk, "requeue_operation")
    form = ReasonForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        reason = form.cleaned_data["reason"]
        try:
            again, _ = requeue_operation(operation=operation, user=request.user, reason=reason)
        except OversightError as error:
            form.add_error(None, str(error))
        else:
            messages.success(
                request,
                f"Operation {operation.pk} is requeued as operation {again.pk}: someone else "
                "decides on it.",
            )
            return redirect("operation", pk=again.pk)
    context = {
        "operation": operation,
        "form": form,
        "requeued_as": requeued_as(operation),
        "why_not": why_not_requeuable(operation),
    }
    status = 400 if request.method == "POST" else 200
    return render(request, "runs/operation_requeue.html", context, status=status)


def requeue_links(user, operation) -> dict:
    """What the operation's page says of a requeue of it: the requeue, or whether
    ``user`` may requeue it. Nothing (and no query) unless it ended without its effect."""
    if operation.status not in REQUEUABLE:
        return {}
    again = requeued_as(operation)
    may = again is None and why_not_requeuable(operation) is None
    return {
        "requeued_as": again,
        "can_requeue": may and has_project_perm(user, operation.project, "requeue_operation"),
    }
