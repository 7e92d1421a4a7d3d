"""Handling out-of-band alerts: an admin acknowledges, then resolves with a note.
Resolving the last open alert of a run halted for reconciliation releases the run."""

from django.db import transaction
from django.utils import timezone

from runs.actors import Actor
from runs.errors import InvalidInput
from runs.models import Alert, Run
from runs.permissions import require_project_perm
from runs.transitions import lock_run, transition_alert, transition_run


def acknowledge_alert(*, alert: Alert, user) -> Alert:
    require_project_perm(user, alert.project, "resolve_alert")
    transition_alert(
        alert=alert,
        to=Alert.Status.ACKNOWLEDGED,
        actor=Actor.of_user(user),
        reason="acknowledged",
        changes={"acknowledged_by": user, "acknowledged_at": timezone.now()},
    )
    return alert


@transaction.atomic
def resolve_alert(*, alert: Alert, user, note: str) -> Alert:
    if not note.strip():
        raise InvalidInput("note: say how the alert was resolved")
    require_project_perm(user, alert.project, "resolve_alert")
    actor = Actor.of_user(user)
    transition_alert(
        alert=alert,
        to=Alert.Status.RESOLVED,
        actor=actor,
        reason=note,
        changes={"resolved_by": user, "resolved_at": timezone.now(), "resolution_note": note},
    )
    run = lock_run(alert.run_id)
    unresolved = run.alerts.exclude(status=Alert.Status.RESOLVED).exists()
    if run.reason == Run.Reason.RECONCILIATION and not unresolved:
        transition_run(run=run, to=Run.Status.QUEUED, actor=actor, reason="alerts resolved")
    return alert
