"""A human request's page: what the agent asks, its context (safe Markdown), and the
controls of its kind (a text box for a question, Sign off and Reject for a sign-off,
a button per choice, fields drawn from the schema for data, with raw JSON beside them);
once answered, who answered, when and how. No challenge to type: nothing executes on
an answer. Worked as operations are (#34): the next and the previous request waiting
for the reviewer are linked, the answer stays in reach in a bar, and an answer opens
the next one waiting."""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST

from runs import queue as waiting
from runs.errors import InvalidInput, OversightError
from runs.forms import AnswerForm, answer_forms, posted_answer
from runs.models import HumanRequest
from runs.permissions import has_project_perm, own_interest
from runs.services.requests import answer
from runs.views.access import load_request
from runs.views.markdown import render as markdown
from runs.views.moving_on import move_on
from runs.views.operations import pretty_json

Kind = HumanRequest.AnswerKind
CHOICE_KEYS = 9  # The digits 1 to 9 choose (static/keys.js); a longer list has no key.
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
    form = posted_answer(human, request.POST)
    if form.is_valid():
        try:
            answer(
                request=human,
                reviewer=request.user,
                kind=form.cleaned_data["kind"],
                version=form.cleaned_data["version"],
                data=form.answer(),
                comment=form.cleaned_data.get("comment", ""),
            )
        except InvalidInput as error:
            for problem in str(error).split("; "):
                form.refuse(problem)
        except OversightError as error:
            form.add_error(None, _refusal(human, request.user, error))
        else:
            return move_on(request, human, CONFIRMATION[form.cleaned_data["kind"]])
    form.focus_first_error()
    return _render(request, human, bound=form, status=400)


def _refusal(human: HumanRequest, reviewer, error: OversightError) -> str:
    """Why an answer was refused. For a request answered meanwhile (the same form posted
    twice, or another reviewer first), who answered it: the service's reason gives only
    its status."""
    human.refresh_from_db()
    if human.answered_by is None:
        return str(error)
    done = "rejected" if human.status == HumanRequest.Status.REJECTED else "answered"
    by = "you" if human.answered_by == reviewer else human.answered_by.get_username()
    return f"Request {human.pk} was already {done} by {by}; this answer was not recorded."


def _render(request, human: HumanRequest, bound: AnswerForm | None = None, status: int = 200):
    can_decide = has_project_perm(request.user, human.project, "decide_operation")
    conflict = own_interest(human, request.user)
    forms = _forms(human, bound)
    context = {
        "human": human,
        "run": human.run,
        "context_html": markdown(human.context),
        "schema": pretty_json(human.answer_schema) if human.answer_schema is not None else "",
        "answer_data": _answer_data(human),
        "can_decide": can_decide,
        "own_interest": conflict,
        "decidable": human.status == HumanRequest.Status.OPEN and can_decide and not conflict,
        "forms": forms,
        "rejection": next((form for form in forms if form.using == "reject"), None),
        "choice_keys": min(len(human.choices or ()), CHOICE_KEYS),
        "refused": bound is not None,
        "bound_errors": bound.errors_above() if bound else [],
        "checkpoints": human.checkpoints.select_related("actor_user").order_by("seq"),
        "next_request": waiting.next_waiting(request.user, human),
        "previous_request": waiting.next_waiting(request.user, human, back=True),
    }
    return render(request, "runs/request.html", context, status=status)


def _answer_data(human: HumanRequest) -> str:
    """A data request's answer as JSON; a question's is shown as the text it is."""
    if human.answer_kind != Kind.ANSWER or human.kind != HumanRequest.Kind.DATA:
        return ""
    return pretty_json(human.answer)


def _forms(human: HumanRequest, bound: AnswerForm | None) -> list[AnswerForm]:
    """Each way to answer the request, its way to accept first; the one posted as it
    came back, with its errors."""
    return [
        bound if bound is not None and bound.using == form.using else form(request=human)
        for form in answer_forms(human)
    ]
