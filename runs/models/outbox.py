from django.db import models


class SentEmail(models.Model):
    """The sent record of an email, keyed by the operation's idempotency key. Written
    as "sending" before the message goes to the mail backend and "sent" after it was
    accepted: a crash in between leaves "sending", which verification reports as not
    verified (the email may or may not have left), and the rollback plan alerts a human."""

    class Status(models.TextChoices):
        SENDING = "sending"
        SENT = "sent"

    idempotency_key = models.CharField(max_length=100, unique=True)
    message_id = models.CharField(max_length=300)
    recipients = models.JSONField()
    subject = models.CharField(max_length=300)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.SENDING)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status__in=["sending", "sent"]), name="sent_email_status_valid"
            )
        ]

    def __str__(self) -> str:
        return f"{self.subject} → {', '.join(self.recipients)} ({self.status})"
