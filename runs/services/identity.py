"""The agent's own names for what it creates (``external_id``: a framework's thread id,
interrupt id…), unique per project and kind, so that a create can be repeated safely.

A create naming an ``external_id`` the token already used for that kind answers the
existing object if the request describes the same thing, and refuses it otherwise; an
``external_id`` of another token's object in the project is refused without saying
anything about that object. Two creates racing with the same name meet at the unique
constraint: the loser's insert fails inside a savepoint, and it reads the winner's.
"""

from collections.abc import Callable

from django.db import IntegrityError, models, transaction

from runs.errors import ExternalIdConflict
from runs.models import AgentToken, HumanRequest, Operation, Run, Session

# How each kind reaches the token that opened its session: its owner.
OWNER = {
    Session: "token",
    Run: "session__token",
    Operation: "run__session__token",
    HumanRequest: "run__session__token",
}


def kind_of(model: type[models.Model]) -> str:
    return model._meta.verbose_name.split()[-1]  # "agent session" → "session"


def owned[Named: models.Model](
    model: type[Named], token: AgentToken | None
) -> models.QuerySet[Named]:
    """The objects of ``model`` that ``token`` owns (``None``: opened without one)."""
    return model.objects.filter(**{OWNER[model]: token})


def named[Named: models.Model](
    model: type[Named],
    *,
    project_id: int,
    token: AgentToken | None,
    external_id: str,
    describes: Callable[[Named], bool],
    create: Callable[[], tuple[Named, bool]],
) -> tuple[Named, bool]:
    """``create()`` under the name ``external_id`` (none if empty), or the token's object
    already so named if ``describes`` it; returns the object and whether it is new.
    ``create`` answers the same pair (a proposal may find its call_id already used); a
    new object it makes is given the name here, if it did not take it itself."""
    if not external_id:
        return create()
    found = _existing(model, project_id, token, external_id, describes)
    if found is not None:
        return found, False
    try:
        with transaction.atomic():  # A savepoint: the race's loser rolls back to here.
            obj, created = create()
            if created and obj.external_id != external_id:
                model.objects.filter(pk=obj.pk).update(external_id=external_id)
                obj.external_id = external_id
            return obj, created
    except IntegrityError:
        found = _existing(model, project_id, token, external_id, describes)
        if found is None:
            raise
        return found, False


def _existing[Named: models.Model](
    model: type[Named],
    project_id: int,
    token: AgentToken | None,
    external_id: str,
    describes: Callable[[Named], bool],
) -> Named | None:
    kind = kind_of(model)
    found = model.objects.filter(project_id=project_id, external_id=external_id).first()
    if found is None:
        return None
    if not owned(model, token).filter(pk=found.pk).exists():
        raise ExternalIdConflict(
            f"external_id: {external_id!r} already names another {kind} in this project"
        )
    if not describes(found):
        raise ExternalIdConflict(
            f"external_id: {external_id!r} already names your {kind} {found.pk}, which "
            "describes something else; use a new external_id"
        )
    return found
