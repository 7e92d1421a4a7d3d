"""``email.send``: send an email through Django's mail framework.

An email cannot be unsent, so its rollback is out-of-band: a person is alerted. The
sent record (``SentEmail``) is the fence: it is written as "sending", under the
worker's confirmed lease, before the message is handed to the backend, and only the
attempt that wrote it sends; it becomes "sent" once the backend accepted the message,
and is removed again if the server refused it outright. Verification reads that record:
sent is applied, no record is absent (no attempt can send any more), "sending" is
uncertain — the handover was interrupted, and a person must find out.
"""

import logging
import smtplib
from email.utils import make_msgid

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import EmailMessage
from django.core.validators import validate_email
from django.db import transaction
from django.utils import timezone
from pydantic import Field, field_validator

from runs.actions.base import (
    Action,
    Arguments,
    Context,
    Effect,
    ExecutionFailed,
    NotApplied,
    PreconditionFailed,
    target_answered,
)
from runs.actions.previews import Message
from runs.models import Operation, SentEmail

log = logging.getLogger(__name__)

# The server turned the message down before accepting it: nothing left. What the agent
# is told of each; the server's own reply (which may name its host, accounts or other
# addresses) goes to the server log only.
REFUSED: dict[type[Exception], str] = {
    ConnectionRefusedError: "the mail server refused the connection",
    smtplib.SMTPConnectError: "the mail server refused the connection",
    smtplib.SMTPHeloError: "the mail server refused the greeting",
    smtplib.SMTPAuthenticationError: "the mail server refused Oversight's credentials",
    smtplib.SMTPSenderRefused: "the mail server refused the sender address",
    smtplib.SMTPRecipientsRefused: "the mail server refused every recipient",
    smtplib.SMTPDataError: "the mail server refused the message",
}


def refusal_reason(refusal: Exception) -> str:
    """The fixed words for ``refusal``, with the server's reply code if it gave one."""
    words = next(text for kind, text in REFUSED.items() if isinstance(refusal, kind))
    code = getattr(refusal, "smtp_code", None)
    return f"{words} (code {code})" if isinstance(code, int) else words


ONE_LINE = r"^[^\r\n\v\f\x1c-\x1e\x85\u2028\u2029]*$"


class EmailArguments(Arguments):
    to: list[str] = Field(min_length=1, max_length=50)
    # A line break in a header would let the subject add headers of its own; and the
    # mail library refuses, at sending, every separator str.splitlines splits on (VT,
    # FF, FS, GS, RS, NEL, U+2028, U+2029 too): refused here, at proposal, instead.
    subject: str = Field(min_length=1, max_length=300, pattern=ONE_LINE)
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


def refused_recipients(args: EmailArguments) -> list[str]:
    """The recipients outside the allowed domains (none when every domain is allowed)."""
    allowed = settings.OVERSIGHT_EMAIL_ALLOWED_DOMAINS
    return [to for to in args.to if allowed and to.rsplit("@", 1)[1] not in allowed]


class SendEmail(Action):
    name = "email.send"
    recorded_in_database = True  # SentEmail: a restore forgets a mail sent after the backup.
    Arguments = EmailArguments
    rollback_kind = Operation.RollbackKind.OUT_OF_BAND
    description = "Send an email; it cannot be unsent, so a failed verification alerts a person."
    checks = "Every recipient is in a domain the server allows (OVERSIGHT_EMAIL_ALLOWED_DOMAINS)."

    def gist(self, args: EmailArguments) -> str:
        people, domains = len(args.to), len({to.rsplit("@", 1)[1].lower() for to in args.to})
        return (
            f"email to {people} recipient{'' if people == 1 else 's'} at {domains} "
            f"domain{'' if domains == 1 else 's'}: {args.subject}"
        )

    def describe(self, args: EmailArguments) -> dict[str, str]:
        return {
            "precondition": "Every recipient is in an allowed domain.",
            "rollback": "None possible once sent: a failed verification alerts a person.",
        }

    def preview(self, args: EmailArguments, ctx: Context) -> Message:
        by_domain: dict[str, list[str]] = {}
        for address in args.to:
            by_domain.setdefault(address.rsplit("@", 1)[1].lower(), []).append(address)
        headers = [
            ["From", settings.DEFAULT_FROM_EMAIL],
            ["To", ", ".join(args.to)],
            ["Subject", args.subject],
        ]
        return Message(
            headers, dict(sorted(by_domain.items())), refused_recipients(args), args.body
        )

    def precondition(self, args: EmailArguments, ctx: Context) -> None:
        if refused := refused_recipients(args):
            raise PreconditionFailed(
                f"recipients outside the allowed domains: {', '.join(refused)}"
            )

    def deduplicates(self, args: EmailArguments) -> bool:
        return True  # Only the attempt that wrote the sent record sends.

    def absence_is_final(self, args: EmailArguments) -> bool:
        return True  # No record: no attempt can send any more (it is written fenced).

    def execute(self, args: EmailArguments, key: str, ctx: Context) -> dict:
        with transaction.atomic():
            ctx.confirm_lease()
            record, created = SentEmail.objects.get_or_create(
                idempotency_key=key,
                defaults={
                    "message_id": make_msgid(idstring=key, domain="oversight.local"),
                    "recipients": list(args.to),
                    "subject": args.subject,
                },
            )
        if not created:
            if record.status == SentEmail.Status.SENT:
                return {"message_id": record.message_id}
            raise ExecutionFailed(
                "an earlier attempt stopped while handing this email over: it may have been sent"
            )
        message = EmailMessage(
            subject=args.subject,
            body=args.body,
            to=list(args.to),
            headers={"Message-ID": record.message_id},
        )
        try:
            message.send()
        except tuple(REFUSED) as refusal:
            target_answered(True)  # With a refusal, but it answered.
            SentEmail.objects.filter(pk=record.pk).delete()
            log.warning("email.send, operation %s: refused: %s", ctx.operation.pk, refusal)
            raise NotApplied(refusal_reason(refusal)) from None
        except OSError:  # Unreachable, timed out, hung up (SMTPException is an OSError).
            target_answered(False)
            raise
        target_answered(True)
        SentEmail.objects.filter(pk=record.pk).update(
            status=SentEmail.Status.SENT, sent_at=timezone.now()
        )
        return {"message_id": record.message_id}

    def verify(self, args: EmailArguments, key: str, ctx: Context) -> Effect:
        record = SentEmail.objects.filter(idempotency_key=key).first()
        if record is None:
            return Effect.ABSENT
        return Effect.APPLIED if record.status == SentEmail.Status.SENT else Effect.UNCERTAIN
