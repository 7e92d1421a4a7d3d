from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from runs import machines
from runs.actors import ActorKind
from runs.canonical import json_hash
from runs.models.choices import choices_constraint
from runs.models.projects import Project
from runs.models.tokens import AgentToken
from runs.payloads import MessageKind, validate_payload


def named_per_token(kind: str, token: str) -> list[models.UniqueConstraint]:
    """An object's ``external_id`` is a name of the token that created it (the field
    ``token``): unique among that token's objects of its kind, so that two agents of a
    project each have their own names and neither can learn or take the other's (#35).
    Objects created without a token (in-process code, never the API) share the
    project's names, as every object did before (``runs.services.identity``)."""
    named = ~models.Q(external_id="")
    return [
        models.UniqueConstraint(
            fields=[token, "external_id"], condition=named, name=f"{kind}_external_id_per_token"
        ),
        models.UniqueConstraint(
            fields=["project", "external_id"],
            condition=named & models.Q(**{f"{token}__isnull": True}),
            name=f"{kind}_external_id_tokenless",
        ),
    ]


class Session(models.Model):
    """One conversation, owned by a person, in one project. Holds several runs."""

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="sessions")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="agent_sessions"
    )
    agent = models.CharField(max_length=200, help_text="Name of the agent in this session.")
    # The token that opened the session: only it may act on the session and its runs.
    token = models.ForeignKey(
        AgentToken, null=True, blank=True, on_delete=models.PROTECT, related_name="sessions"
    )
    title = models.CharField(max_length=300, blank=True)
    # The agent's own name for it (a framework's thread id…): unique per token.
    external_id = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "agent session"
        constraints = named_per_token("session", "token")

    def __str__(self) -> str:
        return self.title or f"session {self.pk}"


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    COMPLETED = "completed"
    PARTIAL = "partial"
    FAILED = "failed"
    CANCELLED = "cancelled"


class RunReason(models.TextChoices):
    NONE = "", "—"
    APPROVAL = "approval"
    NEEDS_INPUT = "needs_input", "needs input"
    RECONCILIATION = "reconciliation"


class Run(models.Model):
    """One goal pursued by an agent. Status changes only through ``runs.transitions``."""

    Status = RunStatus
    Reason = RunReason

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="runs")
    session = models.ForeignKey(Session, on_delete=models.PROTECT, related_name="runs")
    # Its session's token, set when the run is created (``save``): kept on the run itself
    # because the database can hold its external_id unique per token only from its row.
    token = models.ForeignKey(
        AgentToken, null=True, blank=True, on_delete=models.PROTECT, related_name="runs"
    )
    goal = models.TextField()
    # The agent's own name for it (a framework's thread id…): unique per token.
    external_id = models.CharField(max_length=200, blank=True, default="")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    reason = models.CharField(max_length=32, choices=Reason.choices, blank=True, default="")
    unblock = models.CharField(
        max_length=500, blank=True, default="", help_text="What ends the wait."
    )
    outcome = models.TextField(blank=True, default="", help_text="Why the run ended as it did.")
    # Bumped by every checkpoint: equals the seq of the run's latest checkpoint.
    version = models.PositiveIntegerField(default=0)
    cancel_requested = models.BooleanField(default=False)
    retry_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="retries"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            choices_constraint("status", RunStatus, "run_status_valid"),
            choices_constraint("reason", RunReason, "run_reason_valid"),
            # seed 002: waiting always carries its cause and what unblocks it; nothing else does.
            models.CheckConstraint(
                condition=(
                    models.Q(status="waiting") & ~models.Q(reason="") & ~models.Q(unblock="")
                )
                | (~models.Q(status="waiting") & models.Q(reason="")),
                name="run_waiting_has_reason",
            ),
            models.CheckConstraint(
                condition=~models.Q(status="cancelled") | models.Q(cancel_requested=True),
                name="run_cancelled_is_requested",
            ),
            *named_per_token("run", "token"),
        ]
        indexes = [
            # Run list pages: newest first within a project, filtered by status.
            models.Index(
                fields=["project", "status", "-created_at"], name="run_project_status_idx"
            ),
            models.Index(fields=["-created_at"], name="run_created_idx"),
        ]
        permissions = [("cancel_run", "Can cancel runs")]

    def __str__(self) -> str:
        return f"run {self.pk}: {self.goal[:60]}"

    def save(self, *args, **kwargs) -> None:
        if self._state.adding:
            self.token_id = self.session.token_id
        super().save(*args, **kwargs)

    @property
    def is_terminal(self) -> bool:
        return machines.RUN.is_terminal(self.status)


class Message(models.Model):
    """A step of the conversation. ``seq`` is assigned by the writer under the run lock.

    Retention (``runs.retention``) may later replace the payload of a finished run's
    message with ``redacted_payload(payload_sha256)``; the hash stays, so whoever holds
    the original can prove it is the message that was here.
    """

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="messages")
    seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=MessageKind.choices)
    schema_version = models.PositiveSmallIntegerField(default=1)
    payload = models.JSONField()
    payload_sha256 = models.CharField(
        max_length=64, editable=False, help_text="sha256 of the canonical JSON payload."
    )
    author = models.CharField(max_length=200, blank=True)
    # Who wrote it (an agent, a person, Oversight's worker): a "user" message written by
    # an agent's token is shown as reported by that agent, never as the user's own words.
    author_kind = models.CharField(max_length=8, choices=ActorKind.choices, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    redacted_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="message_unique_seq"),
            models.CheckConstraint(condition=models.Q(seq__gte=1), name="message_seq_positive"),
            choices_constraint("kind", MessageKind, "message_kind_valid"),
            # The hash outlives the payload: it is what retention keeps.
            models.CheckConstraint(
                condition=~models.Q(payload_sha256=""), name="message_has_payload_hash"
            ),
            models.CheckConstraint(
                condition=models.Q(redacted_at__isnull=True)
                # has_key first: a missing key compares as NULL, which a CHECK lets pass.
                | models.Q(payload__has_key="redacted", payload__redacted=True),
                name="message_redacted_has_marker",
            ),
        ]
        indexes = [
            # Retention's query: messages not yet redacted, run by run, older than a cutoff.
            models.Index(
                fields=["run", "created_at"],
                condition=models.Q(redacted_at__isnull=True),
                name="message_unredacted_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"message {self.run_id}#{self.seq}"

    def save(self, *args, **kwargs) -> None:
        if self.redacted_at is not None:
            raise ValidationError(f"{self} is redacted; its payload cannot change")
        self.payload = validate_payload(self.kind, self.schema_version, self.payload)
        self.payload_sha256 = json_hash(self.payload)
        super().save(*args, **kwargs)

    def clean(self) -> None:
        try:
            validate_payload(self.kind, self.schema_version, self.payload)
        except ValidationError as exc:
            raise ValidationError({"payload": exc.messages}) from None


def redacted_payload(payload_sha256: str) -> dict:
    """What a message's payload becomes once retention has removed its content."""
    return {"redacted": True, "sha256": payload_sha256}
