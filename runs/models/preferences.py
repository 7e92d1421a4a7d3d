import zoneinfo
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models


def validate_time_zone(value: str) -> None:
    if value not in zoneinfo.available_timezones():
        raise ValidationError(f"{value} is not a known time zone")


class Preferences(models.Model):
    """A person's settings: the time zone pages show times in, the channels that tell
    them of operations and requests waiting for their decision (batched emails, Slack
    direct messages) and their quiet hours for both, and whether single keys act on
    the queue and operation pages."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oversight_preferences"
    )
    time_zone = models.CharField(max_length=64, default="UTC", validators=[validate_time_zone])
    notify_pending = models.BooleanField(
        default=True,
        help_text="Email me, batched, when operations or requests wait for my decision.",
    )
    # Read when an item starts waiting (``runs.services.slack.waiting``) and again
    # before its message is posted (``runs.engine.slack``).
    slack_direct = models.BooleanField(
        db_default=False,
        help_text="Also message me directly in Slack when operations or requests wait for "
        "my decision (your Slack user must be linked).",
    )
    # On the person's own clock (``time_zone``); both or neither (``clean``), the span
    # crossing midnight where it ends earlier than it starts. Read by ``quiet_at``.
    quiet_from = models.TimeField(
        null=True,
        blank=True,
        verbose_name="quiet hours from",
        help_text="No emails or Slack messages about waiting work from this time, in your "
        "time zone; what waited comes after them. Alerts to admins still come at any hour.",
    )
    quiet_until = models.TimeField(
        null=True,
        blank=True,
        verbose_name="quiet hours until",
        help_text="The time they end, the next day if earlier (22:00 to 07:00). Leave both "
        "empty for no quiet hours.",
    )
    # Single keys (WCAG 2.1.4 asks that they can be turned off): a, r, n, q, j.
    shortcuts = models.BooleanField(
        default=True,
        help_text="Keyboard shortcuts on the queue and operation pages: j next in the "
        "queue, a approve, r reject, n next operation, q back to the queue.",
    )
    # When their latest email went out. A worker's claim requires the value it read the
    # batch at, so a batch read before someone else's email is never sent.
    last_notified_at = models.DateTimeField(null=True, blank=True)
    # A worker sending this person's batch holds it until then (longer than the mail
    # timeout), so two workers never send the same batch and a failed send is retried;
    # after a send, the end of the batch window (at most one email per window).
    notify_claimed_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "preferences"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(quiet_from__isnull=True, quiet_until__isnull=True)
                | (
                    models.Q(quiet_from__isnull=False, quiet_until__isnull=False)
                    & ~models.Q(quiet_from=models.F("quiet_until"))
                ),
                name="preferences_quiet_hours_both_or_neither",
            )
        ]

    def __str__(self) -> str:
        return f"preferences of {self.user}"

    def clean(self) -> None:
        """The constraint's rule, with the field to correct named."""
        if (self.quiet_from is None) != (self.quiet_until is None):
            missing = "quiet_from" if self.quiet_from is None else "quiet_until"
            raise ValidationError({missing: "Give both times, or neither."})
        if self.quiet_from is not None and self.quiet_from == self.quiet_until:
            raise ValidationError(
                {"quiet_until": "Quiet hours must start and end at different times."}
            )

    @classmethod
    def of(cls, user) -> "Preferences":
        return cls.objects.get_or_create(user=user)[0]

    def quiet_at(self, instant: datetime) -> bool:
        """Whether ``instant`` (aware) falls in this person's quiet hours, read on their
        own clock: from ``quiet_from`` up to, not including, ``quiet_until``. Every
        channel that tells them about waiting work asks this before it does, and keeps
        what it held back for its first message after (as the batched emails do)."""
        if self.quiet_from is None or self.quiet_until is None:
            return False
        local = instant.astimezone(zoneinfo.ZoneInfo(self.time_zone)).time()
        if self.quiet_from < self.quiet_until:
            return self.quiet_from <= local < self.quiet_until
        return local >= self.quiet_from or local < self.quiet_until  # Across midnight.

    def quiet_ends(self, instant: datetime) -> datetime:
        """When the quiet hours ``instant`` falls in (``quiet_at``) end: the next
        ``quiet_until`` on this person's clock after it."""
        zone = zoneinfo.ZoneInfo(self.time_zone)
        local = instant.astimezone(zone)
        end = datetime.combine(local.date(), self.quiet_until, zone)
        return end if end > local else end + timedelta(days=1)


class Notified(models.Model):
    """Something an email to ``user`` listed, kept while it waits: the next emails list
    only the others (``runs.engine.notifications`` says why a set and not a watermark).
    One table per kind of item, each with a real key to what it names (its rows go with
    it) and a unique index for the batch's "not listed yet"."""

    # Indexed by each table's unique constraint, which leads with it.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", db_index=False
    )

    class Meta:
        abstract = True


class NotifiedOperation(Notified):
    """An operation an email listed. Rows of operations decided since go at the user's
    next email."""

    operation = models.ForeignKey("runs.Operation", on_delete=models.CASCADE, related_name="+")

    class Meta:
        constraints = [
            # Also the index of the batch's "not listed yet" (NOT EXISTS … WHERE user = ?
            # AND operation = ?) and of the clean-up of one user's rows.
            models.UniqueConstraint(fields=["user", "operation"], name="notified_unique")
        ]

    def __str__(self) -> str:
        return f"operation {self.operation_id} notified to user {self.user_id}"


class NotifiedRequest(Notified):
    """A human request an email listed. Rows of requests no longer open go at the user's
    next email."""

    request = models.ForeignKey("runs.HumanRequest", on_delete=models.CASCADE, related_name="+")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "request"], name="notified_request_unique")
        ]

    def __str__(self) -> str:
        return f"request {self.request_id} notified to user {self.user_id}"
