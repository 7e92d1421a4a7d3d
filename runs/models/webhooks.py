"""Signed webhooks: a project's endpoints, the events they want, and one delivery per
endpoint and event (sent by ``runs.engine.webhooks``, recorded by
``runs.services.webhooks``).

How the secret is kept. A receiver checks each delivery's HMAC-SHA256 signature with
the endpoint's secret, so the server needs that secret in clear whenever it signs: a
hash of it, as an agent token keeps, cannot sign. Nor is the secret stored. Each
endpoint keeps a random ``salt``, and its secret is derived from the salt and the
server's key (``OVERSIGHT_SECRET_KEY``, through Django's ``salted_hmac``) each time it
is needed: a copy of the database alone (a backup, a replica, a dump sent to support)
holds no secret, and signing takes both the row and the server's key. Encrypting the
secret with the server's key would protect it the same way, with a cipher, a
dependency and a key format more, and nothing gained. The consequence is the one
Django's sessions and password-reset links already have: rotating
``OVERSIGHT_SECRET_KEY`` changes every endpoint's secret, so after a rotation each
endpoint is given a new salt (``new_secret``) and its receiver the new secret.
"""

import secrets
import uuid
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models.functions import Now
from django.utils.crypto import salted_hmac

from runs.models.alerts import DeliveryStatus
from runs.models.choices import choices_constraint
from runs.models.projects import Project

# Names the server key's use here (``salted_hmac``): a secret derived for webhooks is
# worth nothing to anything else that derives from the same key.
SECRET_PURPOSE = "runs.webhooks.endpoint-secret"


class WebhookKind(models.TextChoices):
    OPERATION_WAITING = "operation.waiting"
    REQUEST_WAITING = "request.waiting"
    DECIDED = "decided"
    ALERT_RAISED = "alert.raised"


class WebhookEndpoint(models.Model):
    """A URL of a project's that receives the events it wants, signed with its secret,
    which is shown once, when it is made (``add``). ``active`` off: nothing more is
    recorded for it, and what it still has pending waits until it is on again."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="webhooks")
    name = models.CharField(max_length=100, help_text="Whose tool it is, e.g. “Teams bot”.")
    url = models.URLField(max_length=2000)
    events = models.JSONField(default=list, blank=True, help_text="The event kinds it wants.")
    salt = models.CharField(max_length=64, editable=False)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="webhook_unique_name")
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.project})"

    def clean(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValidationError({"url": "must be an http(s) URL"})
        if parts.username or parts.password:
            raise ValidationError(
                {"url": "no user or password in the URL: deliveries are signed instead"}
            )
        events = self.events if isinstance(self.events, list) else []
        if not events or any(event not in WebhookKind.values for event in events):
            wanted = ", ".join(WebhookKind.values)
            raise ValidationError({"events": f"one or more of {wanted}"})

    @classmethod
    def add(cls, *, project: Project, name: str, url: str, events: list[str]):
        """Make an endpoint (``ValidationError`` if its fields are not right); returns it
        with its secret, shown this once."""
        endpoint = cls(project=project, name=name, url=url, events=events)
        secret = endpoint.new_secret()
        endpoint.full_clean()
        endpoint.save()
        return endpoint, secret

    def new_secret(self) -> str:
        """Give the endpoint a new salt, hence a new secret (returned; saved by the
        caller): the old secret signs nothing more."""
        self.salt = secrets.token_hex(32)
        return self.secret

    @property
    def shown_url(self) -> str:
        """Its URL as pages show it: scheme and host, as the rest of it may be a secret
        of the receiver's (a path token, a query key)."""
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}/…"

    def set_active(self, active: bool) -> None:
        """Pause (``False``) or resume it. While paused, nothing is recorded for it, and
        what it still has pending waits (``runs.engine.webhooks`` sends active ones)."""
        self.active = active
        self.save(update_fields=["active"])

    @property
    def secret(self) -> str:
        return salted_hmac(SECRET_PURPOSE, self.salt, algorithm="sha256").hexdigest()


class WebhookEvent(models.Model):
    """Something a project's endpoints may want to hear of, as it was when it happened:
    its ``data`` is fixed then, so that every attempt of every delivery sends the same.
    Recorded only when some endpoint wants it, in the transaction of the change."""

    Kind = WebhookKind

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=24, choices=Kind.choices)
    data = models.JSONField()
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [choices_constraint("kind", WebhookKind, "webhook_event_kind_valid")]

    def __str__(self) -> str:
        return f"{self.kind} {self.pk}"


class WebhookDelivery(models.Model):
    """One event for one endpoint, with its outcome. Its ``delivery_id`` is the same on
    every attempt (receivers deduplicate on it); a failed attempt is tried again later
    and later, and after the last one the delivery is failed."""

    Status = DeliveryStatus

    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries"
    )
    event = models.ForeignKey(WebhookEvent, on_delete=models.CASCADE, related_name="deliveries")
    delivery_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True, db_default=Now())
    # The HTTP status of the last answer (none: no answer, see ``last_error``).
    last_status = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "webhook deliveries"
        constraints = [
            models.UniqueConstraint(fields=["endpoint", "event"], name="webhook_delivery_once"),
            choices_constraint("status", DeliveryStatus, "webhook_delivery_status_valid"),
        ]
        indexes = [
            # The notification lane, for each endpoint: WHERE endpoint_id = %s AND
            # status='pending' AND next_attempt_at <= now ORDER BY next_attempt_at.
            models.Index(
                fields=["endpoint", "next_attempt_at"],
                condition=models.Q(status="pending"),
                name="webhook_delivery_due_idx",
            )
        ]

    def __str__(self) -> str:
        return f"{self.event} to {self.endpoint}: {self.status}"

    def send_again(self) -> bool:
        """A failed delivery is pending again, due now, with its eight attempts anew
        (the receiver is back, or was fixed); ``False`` if it is not failed (any more)."""
        again = WebhookDelivery.objects.filter(pk=self.pk, status=DeliveryStatus.FAILED)
        return bool(again.update(status=DeliveryStatus.PENDING, attempts=0, next_attempt_at=Now()))
