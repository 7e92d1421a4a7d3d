"""Agent tokens: issued per project by an admin (page or command), shown once. A token
acts for a member of its project; the owner is never looked up among all users, so
issuing one reveals nothing about people outside the project. Its issuer is recorded:
they may not decide on what its agent proposes or asks (``permissions.own_interest``),
and a token they make for another member acts only once that member accepts it. When a
token will never act again, what only its agent could carry out is withdrawn."""

import logging

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import DatabaseError, transaction
from django.db.models import Q, QuerySet

from runs.actors import Actor
from runs.errors import IllegalTransition, InvalidInput
from runs.models import AgentToken, Operation, Project, Role
from runs.permissions import role_group
from runs.services.proposals import withdraw_operation

log = logging.getLogger(__name__)


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


# Who withdraws an agent operation that no agent can carry out any more, and why.
ORPHANED_BY = Actor.policy("agent token no longer acts")
ORPHANED_REASON = (
    "withdrawn: its agent token no longer acts (revoked, or its owner deactivated), "
    "so no agent can carry it out"
)


def revoke_token(token: AgentToken) -> int:
    """Revoke ``token`` at once, and withdraw what only its agent could carry out;
    returns how many operations were withdrawn."""
    token.revoke()
    return withdraw_orphaned_operations(token)


def withdraw_orphaned_operations(token: AgentToken | None = None) -> int:
    """Withdraw every agent operation not yet claimed (proposed or approved) whose
    session's token will never act again, or only ``token``'s: only that token's agent
    may claim it, so it would wait for ever. A token never acts again once revoked (or
    declined) or once its owner is deactivated: ``revoke_token`` does this at once,
    and every worker's housekeeping once a minute for the rest. A token whose owner
    left the project (or whose role from single sign-on lapsed) may act again when
    they are back: its agent's operations wait, as reviewers may cancel them. What a
    worker carries out goes on as reviewers decide. Returns how many were withdrawn."""
    ended = AgentToken.objects.filter(Q(revoked_at__isnull=False) | Q(owner__is_active=False))
    # Two conditions on status (not IN): each served by its partial index.
    orphaned = Operation.objects.filter(
        Q(status=Operation.Status.PROPOSED) | Q(status=Operation.Status.APPROVED),
        executor=Operation.Executor.AGENT,
        run__session__token__in=ended.filter(pk=token.pk) if token else ended,
    )
    withdrawn = 0
    for operation in sorted(orphaned, key=lambda op: op.pk):
        try:
            withdraw_operation(operation=operation, actor=ORPHANED_BY, reason=ORPHANED_REASON)
        except IllegalTransition:
            continue  # Claimed, decided or expired since it was listed.
        except DatabaseError as error:  # A run locked past the wait: the next round.
            log.warning("operation %s not withdrawn this time: %s", operation.pk, error)
            continue
        withdrawn += 1
    return withdrawn
