from django.contrib import messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from runs.errors import InvalidInput
from runs.forms import TokenForm
from runs.models import AgentToken
from runs.services.tokens import issue_token, project_members, revoke_token
from runs.views.access import load_project, member_projects

# What a member answers a token that would act for them, and what they are told then.
ANSWERS = {
    "accept": (
        AgentToken.accept,
        "Token {name} acts for you from now on; neither you nor {issuer} may decide on "
        "what its agent proposes or asks.",
    ),
    "decline": (AgentToken.decline, "Token {name} is declined: its agent gets 401."),
}


@require_http_methods(["GET", "POST"])
def token_list(request: HttpRequest, slug: str) -> HttpResponse:
    """The project's agent tokens; a new token's secret is shown on this answer only.
    The signed-in admin is recorded as its issuer."""
    project = load_project(request.user, slug, "manage_project")
    members = project_members(project)
    form = TokenForm(request.POST or None, members=members)
    new_token = plain = None
    if request.method == "POST" and form.is_valid():
        try:
            new_token, plain = issue_token(
                project=project,
                name=form.cleaned_data["name"],
                issued_by=request.user,
                owner_username=form.cleaned_data["owner"],
            )
        except InvalidInput as error:
            field, _, problem = str(error).partition(": ")
            form.add_error(field if field in form.fields else None, problem or str(error))
        else:
            form = TokenForm(members=members)
    tokens = project.agent_tokens.select_related("owner", "issued_by").order_by(
        "revoked_at", "name"
    )
    status = 400 if request.method == "POST" and plain is None else 200
    context = {
        "project": project,
        "tokens": tokens,
        "form": form,
        "new_token": new_token,
        "plain": plain,
    }
    return render(request, "runs/tokens.html", context, status=status)


@require_POST
def token_revoke(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """Revokes at once: the question comes before, on the tokens page (this form is in
    each row's Revoke disclosure, behind its consequence). A revoked token stays so."""
    project = load_project(request.user, slug, "manage_project")
    token = get_object_or_404(AgentToken, pk=pk, project=project)
    withdrawn = revoke_token(token)
    said = f"Token {token.name} is revoked; its agent gets 401 from now on"
    if withdrawn:
        said += f", and {withdrawn} operation(s) only it could carry out are withdrawn"
    messages.success(request, f"{said}.")
    return redirect("tokens", slug=project.slug)


def tokens_to_accept(user) -> QuerySet[AgentToken]:
    """The tokens that wait for ``user``'s acceptance, in their projects, oldest first:
    listed on their account page."""
    return (
        AgentToken.awaiting()
        .filter(owner=user, project__in=member_projects(user))
        .select_related("project", "issued_by")
        .order_by("created_at", "pk")
    )


@require_http_methods(["GET", "POST"])
def token_acceptance(request: HttpRequest, pk: int) -> HttpResponse:
    """A token that acts for the signed-in member, in one of their projects: while it
    waits, they accept it (it acts from then on) or decline it (it is revoked). Nobody
    else finds it here, its issuer included (404)."""
    token = get_object_or_404(
        AgentToken.objects.select_related("project", "issued_by"),
        pk=pk,
        owner=request.user,
        project__in=member_projects(request.user),
    )
    error, status = None, 200
    if request.method == "POST":
        answer = ANSWERS.get(request.POST.get("answer", ""))
        if answer is None:
            error, status = "Choose Accept or Decline.", 400
        elif not answer[0](token):
            error, status = "This token no longer waits for your answer.", 409
            token.refresh_from_db()
        else:
            issuer = token.issued_by.get_username() if token.issued_by else "its issuer"
            messages.success(request, answer[1].format(name=token.name, issuer=issuer))
            return redirect("preferences")
    context = {"token": token, "error": error}
    return render(request, "runs/token_acceptance.html", context, status=status)
