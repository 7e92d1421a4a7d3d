"""An operator pausing the workers (every lane, or one) and resuming them
(``WorkerPause``): for a target under repair, a maintenance window, or a restore that
must not fire anything until an admin has looked (``Actor.policy("restore")``).

A pause holds claims only: an operation a worker has already claimed goes on to its end
(effect, verification, rollback), since an effect stopped half-way is worse than one
finished. Each pause and resume is recorded in the installation's chain
(``record_admin_act``) in the same transaction, naming who and why.

Who may: Oversight itself (a policy actor); a superuser; for one lane, an admin of
every project whose operations use it (``file.write project 3`` is one project's; a
shared target such as ``database`` is usually a superuser's). A pause made by a
superuser or by Oversight is resumed by a superuser only: an admin does not undo a
hold put on a target under repair. Every lane needs a superuser. A lane no operation
has used is refused, so that a mistyped lane is not reported as paused while nothing
waits on it."""

from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef

from runs.actors import Actor, ActorKind
from runs.errors import InvalidInput, NotPermitted
from runs.models import Operation, Project
from runs.models.workers import WorkerPause
from runs.permissions import projects_with_perm
from runs.services.admin_record import record_admin_act


@transaction.atomic
def pause_workers(*, lane: str = WorkerPause.EVERY_LANE, actor: Actor, reason: str) -> WorkerPause:
    """Stop the workers claiming operations of ``lane`` ("" for every lane)."""
    reason, lane = reason.strip(), lane.strip()
    if not reason:
        raise InvalidInput("reason: say why the workers are paused")
    _require_may_pause(actor, lane)
    _require_lane_used(lane)
    pause = WorkerPause(lane=lane, reason=reason, paused_by=actor.user, paused_by_label=actor.label)
    try:
        with transaction.atomic():
            pause.save(force_insert=True)
    except IntegrityError:  # The unique lane: someone paused it first.
        raise InvalidInput(f"{pause.scope} is already paused; resume it first") from None
    record_admin_act("workers.paused", actor, detail={"lane": lane, "reason": reason})
    return pause


@transaction.atomic
def resume_workers(*, lane: str = WorkerPause.EVERY_LANE, actor: Actor) -> WorkerPause:
    """End the pause of ``lane`` ("" for every lane); returns the pause ended. Workers
    see it at their next claim (within their idle wait, half a second)."""
    lane = lane.strip()
    _require_may_pause(actor, lane)
    pause = WorkerPause.objects.filter(lane=lane).select_related("paused_by").first()
    if pause is not None:
        _require_may_resume(actor, pause)
    # Deleted by key and counted: of two resumes at once, one records it.
    if pause is None or not WorkerPause.objects.filter(pk=pause.pk).delete()[0]:
        scope = WorkerPause(lane=lane).scope
        raise InvalidInput(f"{scope} is not paused (list_pauses shows what is)")
    record_admin_act(
        "workers.resumed",
        actor,
        detail={"lane": lane, "reason": pause.reason, "paused_by": pause.paused_by_label},
    )
    return pause


def _require_may_pause(actor: Actor, lane: str) -> None:
    """Oversight itself (a policy) always may; a person as the module says; an agent
    never."""
    user = actor.user
    if actor.kind == ActorKind.POLICY:
        return
    if user is None:
        raise NotPermitted(f"{actor.label} may not pause or resume workers")
    if not user.is_active:
        raise NotPermitted(f"{user} is not an active user")
    if user.is_superuser:
        return
    if lane == WorkerPause.EVERY_LANE:
        raise NotPermitted(f"{user} may not pause or resume every worker: a superuser may")
    using = Project.objects.filter(
        Exists(Operation.objects.filter(project=OuterRef("pk"), lane=lane))
    )
    if using.exclude(pk__in=projects_with_perm(user, "manage_project")).exists():
        raise NotPermitted(
            f"{user} may not pause or resume lane {lane}: an admin of every project whose "
            "operations use it may, or a superuser"
        )


def _require_lane_used(lane: str) -> None:
    if lane != WorkerPause.EVERY_LANE and not Operation.objects.filter(lane=lane).exists():
        raise InvalidInput(f"no operation uses lane {lane!r} (list_operations shows lanes)")


def _require_may_resume(actor: Actor, pause: WorkerPause) -> None:
    """What a superuser or Oversight paused, a superuser resumes (or Oversight)."""
    if actor.kind == ActorKind.POLICY or actor.user.is_superuser:
        return
    if pause.paused_by is None or pause.paused_by.is_superuser:
        raise NotPermitted(
            f"{actor.user} may not resume what {pause.paused_by_label} paused: a superuser may"
        )
