"""The agent's own names for what it creates (``external_id``: a framework's thread id,
interrupt id…), so that a create can be repeated safely.

A name belongs to the token that created the object: unique among that token's objects
of its kind, and another token of the project may give the same name to an object of
its own. Neither learns of the other's: a token's creates and lookups by name see only
its own objects (#35). Objects created without a token (in-process code, never the API)
share the project's names among themselves, as every object did before. Both rules are
unique constraints of the database (``runs.models.runs.named_per_token``).

A create naming an ``external_id`` the token already used for that kind answers the
existing object if the request describes the same thing, and refuses it otherwise.
Two creates racing with the same name meet at the unique constraint: the loser's write
fails inside a savepoint, and it reads the winner's.
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
# The token that created each kind, whose name its ``external_id`` is: the column its
# unique constraint holds.
CREATOR = {
    Session: "token",
    Run: "token",
    Operation: "proposed_by_token",
    HumanRequest: "asked_by_token",
}


def kind_of(model: type[models.Model]) -> str:
    return model._meta.verbose_name.split()[-1]  # "agent session" → "session"


def owned[Named: models.Model](
    model: type[Named], token: AgentToken | None
) -> models.QuerySet[Named]:
    """The objects of ``model`` that ``token`` owns (``None``: opened without one)."""
    return model.objects.filter(**{OWNER[model]: token})


def found_by_name[Named: models.Model](
    model: type[Named], token: AgentToken, external_id: str
) -> models.QuerySet[Named]:
    """What the agent API finds by ``external_id``: the object of ``model`` that
    ``token`` created under that name (0 or 1), never another token's."""
    return owned(model, token).filter(**{CREATOR[model]: token}, external_id=external_id)


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
    """The object of ``model`` that ``token`` already named ``external_id`` in the
    project (``None``: the one made without a token), if any, refused if it describes
    something else. Another token's object of that name is never looked at."""
    found = model.objects.filter(
        project_id=project_id, external_id=external_id, **{CREATOR[model]: token}
    ).first()
    if found is not None and not describes(found):
        raise ExternalIdConflict(
            f"external_id: {external_id!r} already names your {kind_of(model)} {found.pk}, "
            "which describes something else; use a new external_id"
        )
    return found
