from django.conf import settings
from django.db import models
from django.db.models.functions import Now

from runs.models.choices import choices_constraint
from runs.models.operations import Operation
from runs.models.projects import Project
from runs.models.runs import Run


class AlertStatus(models.TextChoices):
    OPEN = "open"
    ACKNOWLEDGED = "acknowledged"
    RESOLVED = "resolved"


class AlertQuerySet(models.QuerySet):
    def unresolved(self) -> "AlertQuerySet":
        """Open or acknowledged: still halting its run, still a person's to settle."""
        return self.exclude(status=AlertStatus.RESOLVED)


class Alert(models.Model):
    """An out-of-band alert: a failure a person must look at. It halts its run
    (waiting, reason reconciliation) until an admin resolves it."""

    Status = AlertStatus

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="alerts")
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="alerts")
    operation = models.ForeignKey(
        Operation, null=True, blank=True, on_delete=models.PROTECT, related_name="alerts"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    summary = models.TextField(help_text="What failed.")
    state_left = models.JSONField(default=dict, help_text="What state was left behind.")
    created_at = models.DateTimeField(auto_now_add=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolution_note = models.TextField(blank=True, default="")

    objects = AlertQuerySet.as_manager()

    class Meta:
        constraints = [
            choices_constraint("status", AlertStatus, "alert_status_valid"),
            models.CheckConstraint(
                condition=~models.Q(status="resolved")
                | (models.Q(resolved_by__isnull=False) & ~models.Q(resolution_note="")),
                name="alert_resolution_recorded",
            ),
        ]
        indexes = [
            # The alerts page: open alerts in a project, newest first.
            models.Index(
                fields=["project", "-created_at"],
                condition=~models.Q(status="resolved"),
                name="alert_open_idx",
            )
        ]
        permissions = [("resolve_alert", "Can acknowledge and resolve alerts")]

    def __str__(self) -> str:
        return f"alert {self.pk} ({self.status})"

    def undelivered(self) -> list["AlertDelivery"]:
        """Its deliveries not made yet (pending or failed): what "send again" sends. Read
        from the deliveries prefetched, so the alerts page asks nothing more per alert."""
        return [d for d in self.deliveries.all() if d.status != DeliveryStatus.DELIVERED]


class DeliveryChannel(models.TextChoices):
    IN_APP = "in_app", "in-app"
    EMAIL = "email"
    WEBHOOK = "webhook"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


class AlertDelivery(models.Model):
    """One channel for an alert, with its outcome: retried while it fails, at a slowing
    pace, for ``OVERSIGHT_ALERT_RETRY_HOURS`` from ``retrying_since``
    (``runs.engine.deliveries``)."""

    Channel = DeliveryChannel
    Status = DeliveryStatus

    alert = models.ForeignKey(Alert, on_delete=models.PROTECT, related_name="deliveries")
    channel = models.CharField(max_length=8, choices=Channel.choices)
    target = models.CharField(max_length=500)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    retrying_since = models.DateTimeField(
        db_default=Now(),
        help_text="When its attempts began: the alert raised, or an admin's send again; "
        "in the database's time.",
    )

    class Meta:
        verbose_name_plural = "alert deliveries"
        constraints = [
            choices_constraint("channel", DeliveryChannel, "delivery_channel_valid"),
            choices_constraint("status", DeliveryStatus, "delivery_status_valid"),
        ]
        indexes = [
            # Workers retry: WHERE status='pending' ORDER BY next_attempt_at.
            models.Index(
                fields=["next_attempt_at"],
                condition=models.Q(status="pending"),
                name="delivery_due_idx",
            )
        ]

    def __str__(self) -> str:
        return f"{self.get_channel_display()} to {self.target}: {self.status}"
