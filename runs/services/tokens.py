"""Agent tokens: issued per project by an admin (page or command), shown once."""

from django.contrib.auth import get_user_model

from runs.errors import InvalidInput
from runs.models import AgentToken, Project


def issue_token(*, project: Project, name: str, owner_username: str = "") -> tuple[AgentToken, str]:
    """Create a token named ``name``; sessions its agent opens belong to the user
    ``owner_username`` (default: a user named after the token, who never signs in)."""
    name = name.strip()
    if not name or len(name) > 100:
        raise InvalidInput("name: 1 to 100 characters")
    if AgentToken.objects.filter(project=project, name=name).exists():
        raise InvalidInput(f"name: {project.slug} already has a token named {name!r}")
    users = get_user_model().objects
    if owner_username:
        owner = users.filter(username=owner_username).first()
        if owner is None:
            raise InvalidInput(f"owner: no user {owner_username!r}")
    else:
        username = f"agent-{project.slug}-{name}"[:150]
        owner = users.filter(username=username).first() or users.create_user(username)
    return AgentToken.issue(project=project, name=name, owner=owner)
