"""Out-of-band alerts: raised when a failed verification cannot be rolled back in band
(or the rollback itself failed). An alert halts its run (waiting, reconciliation) in
the same transaction, and queues its deliveries: in-app at once, email to the
project's admins and ``OVERSIGHT_ALERT_EMAILS``, and the webhook if one is set (sent by
the workers, retried while they fail, for a day; an admin may send again what was not
delivered). An admin acknowledges, then resolves with a note; resolving the last open
alert of a halted run releases the run."""

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from runs.actions.base import Effect
from runs.actors import Actor
from runs.clock import db_now
from runs.errors import InvalidInput
from runs.models import Alert, AlertDelivery, Operation, Role, Run
from runs.permissions import require_project_perm
from runs.services import webhooks
from runs.services.runs import awaited
from runs.transitions import (
    lock_run,
    record_run_event,
    transition_alert,
    transition_operation,
    transition_run,
)


@transaction.atomic
def raise_alert(*, operation: Operation, actor: Actor, summary: str, state_left: dict) -> Alert:
    transition_operation(
        operation=operation,
        to=Operation.Status.ALERTED,
        actor=actor,
        reason=summary,
        changes={
            "status_reason": summary,
            "lease_expires_at": None,
            "result": Effect.UNCERTAIN.observation(alerted=summary),
        },
    )
    alert = Alert.objects.create(
        project_id=operation.project_id,
        run_id=operation.run_id,
        operation=operation,
        summary=summary,
        state_left=state_left,
    )
    # The database's clock: workers compare ``next_attempt_at`` with it, and a host
    # whose clock runs ahead would otherwise hold the alert back by as much.
    now = db_now()
    AlertDelivery.objects.bulk_create(
        [
            AlertDelivery(
                alert=alert,
                channel=AlertDelivery.Channel.IN_APP,
                target="alerts page",
                status=AlertDelivery.Status.DELIVERED,
                attempts=1,
                delivered_at=now,
                retrying_since=now,
            ),
            *(
                AlertDelivery(
                    alert=alert,
                    channel=channel,
                    target=target,
                    next_attempt_at=now,
                    retrying_since=now,
                )
                for channel, target in _recipients(operation)
            ),
        ]
    )
    run = lock_run(operation.run_id)
    if not run.is_terminal:
        transition_run(
            run=run,
            to=Run.Status.WAITING,
            actor=actor,
            reason=Run.Reason.RECONCILIATION,
            unblock=f"an admin resolves alert {alert.pk}",
            detail={"alert": alert.pk},
        )
    webhooks.alert_raised(alert)
    return alert


def _recipients(operation: Operation) -> list[tuple[str, str]]:
    admins = operation.project.memberships.filter(role__name=Role.ADMIN).exclude(user__email="")
    emails = sorted(
        {
            *admins.values_list("user__email", flat=True),
            *operation.project.alert_emails,
            *settings.OVERSIGHT_ALERT_EMAILS,
        }
    )
    recipients = [(AlertDelivery.Channel.EMAIL, email) for email in emails]
    if settings.OVERSIGHT_ALERT_WEBHOOK_URL:
        recipients.append((AlertDelivery.Channel.WEBHOOK, settings.OVERSIGHT_ALERT_WEBHOOK_URL))
    return recipients


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
def send_alert_again(*, alert: Alert, user) -> int:
    """Make the alert's deliveries not yet made (failed, or pending a retry) due now, with
    a new span of retries, and record who asked; returns how many. Their rows are locked
    first, so a worker's outcome lands before (a success is then left alone) or after
    (and is ignored: the attempt was overtaken)."""
    require_project_perm(user, alert.project, "resolve_alert")
    run = lock_run(alert.run_id)  # Resolving takes it too: the alert cannot close meanwhile.
    if Alert.objects.filter(pk=alert.pk, status=Alert.Status.RESOLVED).exists():
        raise InvalidInput(f"alert {alert.pk} is resolved: there is nothing to send again")
    undelivered = alert.deliveries.exclude(status=AlertDelivery.Status.DELIVERED)
    ids = list(undelivered.select_for_update().values_list("pk", flat=True))
    if not ids:
        raise InvalidInput(f"alert {alert.pk} has reached every recipient: nothing to send again")
    now = db_now()
    undelivered.filter(pk__in=ids).update(
        status=AlertDelivery.Status.PENDING, next_attempt_at=now, retrying_since=now
    )
    record_run_event(
        run=run,
        actor=Actor.of_user(user),
        event="alert.send_again",
        reason=f"send alert {alert.pk} again",
        detail={"alert": alert.pk, "deliveries": ids},
    )
    return len(ids)


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
    unresolved = run.alerts.unresolved().exists()
    if run.reason == Run.Reason.RECONCILIATION and not unresolved:
        release_run(run, actor)
    return alert


def release_run(run: Run, actor: Actor) -> None:
    """End a reconciliation halt: back to waiting for what still waits for a person
    (answers to open requests, decisions on proposals), otherwise back to the queue."""
    if waits := awaited(run):
        reason, unblock = waits
        transition_run(
            run=run,
            to=Run.Status.WAITING,
            actor=actor,
            reason=reason,
            unblock=unblock,
            detail={"released": "alerts resolved"},
        )
    else:
        transition_run(run=run, to=Run.Status.QUEUED, actor=actor, reason="alerts resolved")
