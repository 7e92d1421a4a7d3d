from django.conf import settings
from django.db import models

from runs import machines
from runs.models.choices import choices_constraint
from runs.models.projects import Project
from runs.models.runs import Run, named_per_token
from runs.models.tokens import AgentToken


class RequestStatus(models.TextChoices):
    OPEN = "open"
    ANSWERED = "answered"
    REJECTED = "rejected"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


class RequestKind(models.TextChoices):
    """What the agent asks for, which sets the reviewer's controls and the answer's
    shape: a question (an answer in words), a sign-off (sign off, or reject), a choice
    (one of its choices) or data (valid against its JSON Schema)."""

    QUESTION = "question"
    SIGN_OFF = "sign_off", "Sign-off"
    CHOICE = "choice"
    DATA = "data"


class AnswerKind(models.TextChoices):
    """What the reviewer did: signed off, refused (with a reason), answered with data
    that fits the request's schema, or chose one of its choices."""

    APPROVE = "approve"
    REJECT = "reject"
    ANSWER = "answer"
    CHOOSE = "choose"


class HumanRequest(models.Model):
    """A question, a sign-off, a choice or data an agent asks of people, which Oversight
    does not execute: a prompt, its kind, what the answer must look like (choices for a
    choice, a JSON Schema for data), and context. Its run waits (``needs_input``) until
    it is answered, refused, expired or withdrawn. Status changes only through
    ``runs.transitions``; ``version`` lets an agent long-poll it."""

    Status = RequestStatus
    Kind = RequestKind
    AnswerKind = AnswerKind

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="requests")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="requests")
    # The agent's own name for it (a framework's interrupt id…): unique per token.
    external_id = models.CharField(max_length=200, blank=True, default="")
    prompt = models.TextField()
    kind = models.CharField(
        max_length=8, choices=RequestKind.choices, db_default=RequestKind.SIGN_OFF
    )
    context = models.TextField(blank=True, default="", help_text="Markdown, shown escaped.")
    answer_schema = models.JSONField(null=True, blank=True)
    # The schema's properties in the order the agent gave them, which its form follows:
    # PostgreSQL's jsonb keeps an object's keys in an order of its own (shortest first).
    property_order = models.JSONField(null=True, blank=True)
    choices = models.JSONField(null=True, blank=True)
    # The token that asked: a person it acts for may not answer (four eyes).
    asked_by_token = models.ForeignKey(
        AgentToken, null=True, blank=True, on_delete=models.PROTECT, related_name="requests"
    )
    status = models.CharField(max_length=16, choices=RequestStatus.choices, default="open")
    version = models.PositiveIntegerField(default=1)
    expires_at = models.DateTimeField(help_text="Deadline for an answer.")
    answer_kind = models.CharField(max_length=8, choices=AnswerKind.choices, blank=True)
    answer = models.JSONField(null=True, blank=True)
    comment = models.TextField(blank=True, default="")
    answered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="answered_requests",
    )
    answered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            choices_constraint("status", RequestStatus, "request_status_valid"),
            # Choices make a choice and a schema data; a question and a sign-off have
            # neither: what a request asks can be read from its kind alone.
            models.CheckConstraint(
                condition=models.Q(
                    kind=RequestKind.CHOICE, choices__isnull=False, answer_schema__isnull=True
                )
                | models.Q(kind=RequestKind.DATA, choices__isnull=True, answer_schema__isnull=False)
                | models.Q(
                    kind__in=[RequestKind.QUESTION, RequestKind.SIGN_OFF],
                    choices__isnull=True,
                    answer_schema__isnull=True,
                ),
                name="request_kind_fits_its_shape",
            ),
            # The answer is the kind's own: signed off, chosen, or answered (in words or
            # with data); any of them may be rejected.
            models.CheckConstraint(
                condition=models.Q(answer_kind__in=["", AnswerKind.REJECT])
                | models.Q(kind=RequestKind.SIGN_OFF, answer_kind=AnswerKind.APPROVE)
                | models.Q(kind=RequestKind.CHOICE, answer_kind=AnswerKind.CHOOSE)
                | models.Q(
                    kind__in=[RequestKind.QUESTION, RequestKind.DATA], answer_kind=AnswerKind.ANSWER
                ),
                name="request_answer_fits_its_kind",
            ),
            models.CheckConstraint(
                condition=models.Q(answer_kind="") | models.Q(answer_kind__in=AnswerKind.values),
                name="request_answer_kind_valid",
            ),
            *named_per_token("request", "asked_by_token"),
            # Answered or refused by a person, who is named, with when and how.
            models.CheckConstraint(
                condition=~models.Q(status__in=["answered", "rejected"])
                | (
                    models.Q(answered_by__isnull=False)
                    & models.Q(answered_at__isnull=False)
                    & ~models.Q(answer_kind="")
                ),
                name="request_answer_recorded",
            ),
            models.CheckConstraint(
                condition=~models.Q(status="rejected") | ~models.Q(comment=""),
                name="request_rejection_has_reason",
            ),
        ]
        indexes = [
            # The reviewers' queue and the expiry sweep: open requests, oldest first.
            models.Index(
                fields=["project", "created_at"],
                condition=models.Q(status="open"),
                name="request_open_idx",
            ),
            # The queue's count and version, from the index alone (as for operations).
            models.Index(
                fields=["project", "updated_at", "status"],
                condition=models.Q(status="open"),
                name="request_queue_version_idx",
            ),
            models.Index(
                fields=["expires_at"], condition=models.Q(status="open"), name="request_due_idx"
            ),
            models.Index(fields=["run", "status"], name="request_run_status_idx"),
        ]

    def __str__(self) -> str:
        return f"request {self.pk} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return machines.REQUEST.is_terminal(self.status)
