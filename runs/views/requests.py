"""A human request's page: what the agent asks, its context (safe Markdown), and the
answer the request allows; once answered, who answered, when and how. No challenge to
type: nothing executes on an answer."""

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from runs.errors import InvalidInput, OversightError
from runs.forms import AnswerForm
from runs.models import HumanRequest
from runs.permissions import has_project_perm
from runs.services.decisions import own_interest
from runs.services.requests import allowed_kinds, answer
from runs.views.access import load_request
from runs.views.markdown import render as markdown
from runs.views.operations import pretty_json

Kind = HumanRequest.AnswerKind
# Where a refusal from the service belongs on the form; elsewhere: above it.
FIELDS = {"data": "value", "comment": "comment"}
CONFIRMATION = {
    Kind.APPROVE: "Signed off; the agent reads your answer.",
    Kind.REJECT: "Rejected; the agent reads your reason.",
    Kind.ANSWER: "Answered; the agent reads your answer.",
    Kind.CHOOSE: "Chosen; the agent reads your choice.",
}


@require_GET
def detail(request: HttpRequest, pk: int) -> HttpResponse:
    return _render(request, load_request(request.user, pk))


@require_POST
def answer_view(request: HttpRequest, pk: int) -> HttpResponse:
    human = load_request(request.user, pk, "decide_operation")
    form = AnswerForm(request.POST, request=human, auto_id=_auto_id(request.POST.get("kind")))
    if form.is_valid():
        try:
            answer(
                request=human,
                reviewer=request.user,
                kind=form.cleaned_data["kind"],
                version=form.cleaned_data["version"],
                data=form.answer(),
                comment=form.cleaned_data["comment"],
            )
        except InvalidInput as error:
            for problem in str(error).split("; "):
                form.add_error(FIELDS.get(problem.split(":", 1)[0].split(".", 1)[0]), problem)
        except OversightError as error:
            form.add_error(None, str(error))
        else:
            messages.success(request, CONFIRMATION[form.cleaned_data["kind"]])
            return redirect("request", pk=human.pk)
    return _render(request, human, bound=form, status=400)


def _render(request, human: HumanRequest, bound: AnswerForm | None = None, status: int = 200):
    context = {
        "human": human,
        "run": human.run,
        "context_html": markdown(human.context),
        "schema": pretty_json(human.answer_schema) if human.answer_schema is not None else "",
        "answer_data": pretty_json(human.answer) if human.answer_kind == Kind.ANSWER else "",
        "can_decide": has_project_perm(request.user, human.project, "decide_operation"),
        "own_interest": own_interest(human, request.user),
        "forms": _forms(human, bound),
        "bound_kind": bound.data.get("kind") if bound else None,
        "bound_errors": bound.non_field_errors() if bound else [],
        "checkpoints": human.checkpoints.select_related("actor_user").order_by("seq"),
    }
    return render(request, "runs/request.html", context, status=status)


def _forms(human: HumanRequest, bound: AnswerForm | None) -> dict[str, AnswerForm]:
    """One form per kind the request allows, its own way to accept first."""
    forms = {
        kind: AnswerForm(
            initial={"kind": kind, "version": human.version}, request=human, auto_id=_auto_id(kind)
        )
        for kind in allowed_kinds(human)
    }
    if bound is not None and bound.data.get("kind") in forms:
        forms[bound.data["kind"]] = bound
    return forms


def _auto_id(kind: str | None) -> str:
    """Two forms share one page: each gets its own element ids."""
    return f"{kind if kind in Kind.values else 'answer'}-%s"
