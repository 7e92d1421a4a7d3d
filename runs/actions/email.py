"""``email.send``: send an email through Django's mail framework.

An email cannot be unsent, so its rollback is out-of-band: a person is alerted. The
sent record (``SentEmail``) is written as "sending" before the message is handed to
the backend and "sent" once the backend accepted it; verification reads that record.
"""

from email.utils import make_msgid

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import EmailMessage
from django.core.validators import validate_email
from django.utils import timezone
from pydantic import Field, field_validator

from runs.actions.base import Action, Arguments, Context, ExecutionFailed, PreconditionFailed
from runs.models import Operation, SentEmail


class EmailArguments(Arguments):
    to: list[str] = Field(min_length=1, max_length=50)
    subject: str = Field(min_length=1, max_length=300)
    body: str = Field(max_length=100_000)

    @field_validator("to")
    @classmethod
    def addresses(cls, to: list[str]) -> list[str]:
        for address in to:
            try:
                validate_email(address)
            except ValidationError:
                raise ValueError(f"{address!r} is not an email address") from None
        return to


class SendEmail(Action):
    name = "email.send"
    Arguments = EmailArguments
    rollback_kind = Operation.RollbackKind.OUT_OF_BAND

    def describe(self, args: EmailArguments) -> dict[str, str]:
        return {
            "precondition": "Every recipient is in an allowed domain.",
            "rollback": "None possible once sent: a failed verification alerts a person.",
        }

    def precondition(self, args: EmailArguments, ctx: Context) -> None:
        allowed = settings.OVERSIGHT_EMAIL_ALLOWED_DOMAINS
        refused = [to for to in args.to if allowed and to.rsplit("@", 1)[1] not in allowed]
        if refused:
            raise PreconditionFailed(
                f"recipients outside the allowed domains: {', '.join(refused)}"
            )

    def execute(self, args: EmailArguments, key: str, ctx: Context) -> dict:
        record, created = SentEmail.objects.get_or_create(
            idempotency_key=key,
            defaults={
                "message_id": make_msgid(idstring=key, domain="oversight.local"),
                "recipients": list(args.to),
                "subject": args.subject,
            },
        )
        if not created and record.status == SentEmail.Status.SENDING:
            raise ExecutionFailed(
                "an earlier attempt stopped while handing this email over: it may have been sent"
            )
        if created:
            message = EmailMessage(
                subject=args.subject,
                body=args.body,
                to=list(args.to),
                headers={"Message-ID": record.message_id},
            )
            message.send()
            SentEmail.objects.filter(pk=record.pk).update(
                status=SentEmail.Status.SENT, sent_at=timezone.now()
            )
        return {"message_id": record.message_id}

    def verify(self, args: EmailArguments, key: str, ctx: Context) -> bool:
        return SentEmail.objects.filter(idempotency_key=key, status=SentEmail.Status.SENT).exists()
