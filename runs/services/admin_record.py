"""Recording an act on the installation (``AdminCheckpoint``): one hash chain for the
whole installation, appended in the caller's transaction so that the record and the
change it records commit together or not at all.

Two writers at once both read the same head; the unique ``seq`` lets one of them in and
sends the other round again, so no lock is held between reading the head and writing
(a writer stopped there holds nothing the other waits on for longer than its insert)."""

from django.db import IntegrityError, transaction

from runs.actors import Actor
from runs.chain import GENESIS, admin_checkpoint_hash
from runs.models import AdminCheckpoint, Project

TRIES = 5


def record_admin_act(
    event: str, actor: Actor, *, project: Project | None = None, detail: dict | None = None
) -> AdminCheckpoint:
    """Append ``event`` by ``actor`` to the installation's chain, and return it."""
    for attempt in range(1, TRIES + 1):
        try:
            with transaction.atomic():
                return _append(event, actor, project, detail or {})
        except IntegrityError:
            if attempt == TRIES:
                raise


def _append(event: str, actor: Actor, project: Project | None, detail: dict) -> AdminCheckpoint:
    head = AdminCheckpoint.objects.order_by("-seq").values("seq", "hash").first()
    checkpoint = AdminCheckpoint(
        seq=head["seq"] + 1 if head else 1,
        actor_kind=actor.kind,
        actor_user=actor.user,
        actor_label=actor.label,
        project=project,
        event=event,
        detail=detail,
        prev_hash=head["hash"] if head else GENESIS,
    )
    checkpoint.hash = admin_checkpoint_hash(checkpoint)
    checkpoint.save(force_insert=True)
    return checkpoint
