"""Agent tokens: issued per project by an admin (page or command), shown once. A token
acts for a member of its project; the owner is never looked up among all users, so
issuing one reveals nothing about people outside the project. Its issuer is recorded:
they may not decide on what its agent proposes or asks (``permissions.own_interest``),
and a token they make for another member acts only once that member accepts it."""

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet

from runs.errors import InvalidInput
from runs.models import AgentToken, Project, Role
from runs.permissions import role_group


def project_members(project: Project) -> QuerySet:
    """The users with a role in ``project``, by username."""
    return (
        get_user_model()
        .objects.filter(memberships__project=project)
        .distinct()
        .order_by("username")
    )


@transaction.atomic
def issue_token(
    *, project: Project, name: str, issued_by, owner_username: str = ""
) -> tuple[AgentToken, str]:
    """Create a token named ``name``, issued by ``issued_by`` (an admin of ``project``
    on its page, the user named to the command); sessions its agent opens belong to the
    member ``owner_username`` (default: a stand-in user named after the token). A token
    for another member than its issuer waits for their acceptance; one for a stand-in
    acts at once."""
    name = name.strip()
    if not name or len(name) > 100:
        raise InvalidInput("name: 1 to 100 characters")
    if AgentToken.objects.filter(project=project, name=name).exists():
        raise InvalidInput(f"name: {project.slug} already has a token named {name!r}")
    if owner_username:
        owner = project_members(project).filter(username=owner_username).first()
        if owner is None:
            raise InvalidInput(f"owner: {project.slug} has no member {owner_username!r}")
        _check_can_accept(owner, issued_by)
    else:
        owner = _stand_in(project, f"agent-{project.slug}-{name}"[:150])
    try:
        return AgentToken.issue(
            project=project,
            name=name,
            owner=owner,
            issued_by=issued_by,
            stand_in=not owner_username,
        )
    except ValidationError as error:
        raise InvalidInput(f"owner: {' '.join(error.messages)}") from None


def _check_can_accept(owner, issued_by) -> None:
    """A token for another member than its issuer waits for that member's acceptance: a
    member who never signs in (another token's stand-in) could never give it."""
    if owner != issued_by and not owner.has_usable_password():
        raise InvalidInput(
            f"owner: {owner.get_username()} never signs in, so could never accept a token "
            "that acts for them; leave it empty for a new stand-in user"
        )


def _stand_in(project: Project, username: str):
    """A user who only stands for the agent: no password (never signs in), and made a
    member with the read-only auditor role, since a token acts only for members. A
    person who happens to have that name is never taken for a stand-in."""
    users = get_user_model().objects
    user = users.filter(username=username).first()
    if user is None:
        user = users.create_user(username)
        project.memberships.create(user=user, role=role_group(Role.AUDITOR))
    elif user.has_usable_password() or not project.memberships.filter(user=user).exists():
        raise InvalidInput("owner: name one of the project's members as the token's owner")
    return user
