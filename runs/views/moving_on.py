"""After a decision, the next item waiting for the reviewer (#34): an operation decided
opens the next operation, a request answered the next request."""

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.html import format_html

from runs import queue as waiting
from runs.models import HumanRequest, Operation


def move_on(request: HttpRequest, decided: Operation | HumanRequest, done: str) -> HttpResponse:
    """The page of the next item of ``decided``'s kind waiting for the reviewer, with
    ``done`` in a message that links back to ``decided``; if none waits, ``decided``'s
    own page, to watch it go through, with ``done`` alone."""
    if isinstance(decided, HumanRequest):
        page, what = "request", decided.get_kind_display().lower()
    else:
        page, what = "operation", decided.action
    following = waiting.next_waiting(request.user, decided)
    if following is None:
        messages.success(request, done)
        return redirect(page, pk=decided.pk)
    messages.success(
        request,
        format_html(
            '<a href="{}">{} {}</a> ({}): {} This one waits for you next.',
            reverse(page, args=[decided.pk]),
            page.capitalize(),
            decided.pk,
            what,
            done,
        ),
    )
    return redirect(page, pk=following.pk)
