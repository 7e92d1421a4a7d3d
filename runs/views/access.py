"""Loading objects for a user: 404 outside the user's projects, 403 without the role.

Every member of a project (reviewer, auditor, admin) may look at its runs; acting
needs the permission of the action. A project the user is not a member of is
indistinguishable from one that does not exist.
"""

from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404

from runs.models import (
    Alert,
    Checkpoint,
    CheckpointArtifact,
    HumanRequest,
    Operation,
    Project,
    Run,
)
from runs.permissions import has_project_perm, projects_with_perm

MEMBER = "view_run"


def member_projects(user) -> QuerySet[Project]:
    return projects_with_perm(user, MEMBER)


def require_perm(user, project: Project, codename: str) -> None:
    if not has_project_perm(user, project, codename):
        raise PermissionDenied(f"Your role in {project} does not allow this.")


def _load(queryset: QuerySet, user, pk: int, perm: str | None, project: str = "project"):
    """``project`` is the path from the object to its project."""
    obj = get_object_or_404(queryset, pk=pk, **{f"{project}__in": member_projects(user)})
    if perm:
        require_perm(user, obj.project, perm)
    return obj


def load_project(user, slug: str, perm: str) -> Project:
    project = get_object_or_404(member_projects(user), slug=slug)
    require_perm(user, project, perm)
    return project


def load_operation(user, pk: int, perm: str | None = None) -> Operation:
    queryset = Operation.objects.select_related(
        "project", "run__session__owner", "run__session__token__issued_by", "requeued_by"
    )
    return _load(queryset, user, pk, perm)


def load_request(user, pk: int, perm: str | None = None) -> HumanRequest:
    queryset = HumanRequest.objects.select_related(
        "project",
        "run__session__owner",
        "run__session__token__issued_by",
        "asked_by_token",
        "answered_by",
    )
    return _load(queryset, user, pk, perm)


def load_run(user, pk: int, perm: str | None = None) -> Run:
    return _load(
        Run.objects.select_related("project", "session__owner", "session__token"), user, pk, perm
    )


def load_alert(user, pk: int, perm: str | None = None) -> Alert:
    return _load(Alert.objects.select_related("project", "run", "operation"), user, pk, perm)


def load_checkpoint(user, pk: int) -> Checkpoint:
    queryset = Checkpoint.objects.select_related("run__project", "run__session", "operation")
    return _load(queryset, user, pk, None)


def load_artifact_ref(user, pk: int) -> CheckpointArtifact:
    """A named artifact version, through the project of the checkpoint that added it."""
    queryset = CheckpointArtifact.objects.select_related("artifact", "checkpoint__run__project")
    return _load(queryset, user, pk, None, project="checkpoint__project")
