"""Roles are Django groups with permissions; a Membership gives a user a role in one
project. A permission therefore holds only inside the projects where the user has a
role that grants it: ``has_project_perm(user, project, "decide_operation")``."""

from django.contrib.auth.models import Group, Permission
from django.db.models import QuerySet

from runs.errors import NotPermitted
from runs.models import HumanRequest, Membership, Operation, Project, Role

_READ = [
    "view_project",
    "view_session",
    "view_run",
    "view_message",
    "view_operation",
    "view_decision",
    "view_checkpoint",
    "view_artifact",
    "view_alert",
]

ROLE_PERMISSIONS: dict[str, list[str]] = {
    Role.REVIEWER: [*_READ, "decide_operation"],
    Role.AUDITOR: _READ,
    Role.ADMIN: [*_READ, "cancel_run", "resolve_alert", "requeue_operation", "manage_project"],
}


def sync_roles(**_kwargs) -> None:
    """Create the role groups and give each exactly its permissions (run after migrate)."""
    for role, codenames in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=role)
        group.permissions.set(
            Permission.objects.filter(content_type__app_label="runs", codename__in=codenames)
        )


def role_group(role: str) -> Group:
    return Group.objects.get(name=role)


def has_project_perm(user, project: Project, codename: str) -> bool:
    if not user.is_authenticated or not user.is_active:
        return False
    return Membership.objects.filter(
        project=project,
        user=user,
        role__permissions__codename=codename,
        role__permissions__content_type__app_label="runs",
    ).exists()


def require_project_perm(user, project: Project, codename: str) -> None:
    if not has_project_perm(user, project, codename):
        raise NotPermitted(f"{user} may not {codename.replace('_', ' ')} in {project}")


def projects_with_perm(user, codename: str) -> QuerySet[Project]:
    return Project.objects.filter(
        memberships__user=user,
        memberships__role__permissions__codename=codename,
        memberships__role__permissions__content_type__app_label="runs",
    ).distinct()


def own_interest(item: Operation | HumanRequest, reviewer) -> str | None:
    """Why ``reviewer`` may not decide on ``item`` (four eyes), if so: they own its run,
    or the agent token that proposed the operation (asked the request) acts for them or
    was issued by them, whoever owns the run: whoever mints a token can drive its agent.
    One rule for operations and human requests."""
    if item.run.session.owner_id == reviewer.pk:
        return "you own this run, so someone else must decide on it"
    if isinstance(item, Operation) and item.requeued_by_id == reviewer.pk:
        return "you requeued this, so someone else must decide on it"
    if isinstance(item, HumanRequest):
        token, did = item.asked_by_token, "asked"
    else:
        token, did = item.proposed_by_token, "proposed"
    if token is None:
        return None
    if token.owner_id == reviewer.pk:
        return f"you own the agent token that {did} this, so someone else must decide on it"
    if token.issued_by_id == reviewer.pk:
        return f"you issued the agent token that {did} this, so someone else must decide on it"
    return None


def excluding_own_interest(items: QuerySet, user) -> QuerySet:
    """``items`` (operations or human requests) without those ``user`` may not decide,
    as ``own_interest`` says, in SQL: for the queue's next and the reviewers' emails."""
    token = "asked_by_token" if items.model is HumanRequest else "proposed_by_token"
    items = (
        items.exclude(run__session__owner=user)
        .exclude(**{f"{token}__owner": user})
        .exclude(**{f"{token}__issued_by": user})
    )
    return items.exclude(requeued_by=user) if items.model is Operation else items
