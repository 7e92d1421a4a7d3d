from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from runs.errors import InvalidInput
from runs.forms import TokenForm
from runs.models import AgentToken
from runs.services.tokens import issue_token, project_members
from runs.views.access import load_project


@require_http_methods(["GET", "POST"])
def token_list(request: HttpRequest, slug: str) -> HttpResponse:
    """The project's agent tokens; a new token's secret is shown on this answer only."""
    project = load_project(request.user, slug, "manage_project")
    members = project_members(project)
    form = TokenForm(request.POST or None, members=members)
    plain = None
    if request.method == "POST" and form.is_valid():
        try:
            _, plain = issue_token(
                project=project,
                name=form.cleaned_data["name"],
                owner_username=form.cleaned_data["owner"],
            )
        except InvalidInput as error:
            field, _, problem = str(error).partition(": ")
            form.add_error(field if field in form.fields else None, problem or str(error))
        else:
            form = TokenForm(members=members)
    tokens = project.agent_tokens.select_related("owner").order_by("revoked_at", "name")
    status = 400 if request.method == "POST" and plain is None else 200
    context = {"project": project, "tokens": tokens, "form": form, "plain": plain}
    return render(request, "runs/tokens.html", context, status=status)


@require_POST
def token_revoke(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """Revokes at once: the question comes before, on the tokens page (this form is in
    each row's Revoke disclosure, behind its consequence). A revoked token stays so."""
    project = load_project(request.user, slug, "manage_project")
    token = get_object_or_404(AgentToken, pk=pk, project=project)
    token.revoke()
    messages.success(request, f"Token {token.name} is revoked; its agent gets 401 from now on.")
    return redirect("tokens", slug=project.slug)
