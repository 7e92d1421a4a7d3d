from django.conf import settings
from django.db import models

from runs import machines
from runs.models.choices import Risk, choices_constraint
from runs.models.projects import Project
from runs.models.runs import Run, named_per_token
from runs.models.tokens import AgentToken


class OperationStatus(models.TextChoices):
    PROPOSED = "proposed"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    IN_FLIGHT = "in_flight", "in flight"
    COMMITTED = "committed"
    PRECONDITION_FAILED = "precondition_failed", "precondition failed"
    VERIFY_FAILED = "verify_failed", "verification failed"
    # The effect did not happen: the target refused it, or it is provably absent.
    FAILED = "failed"
    ROLLED_BACK = "rolled_back", "rolled back"
    COMPENSATED = "compensated"
    ALERTED = "alerted"


# In flight or rolling back: held under a lease (an expiry and a fencing epoch), and
# claimed again where it stands once the lease expired.
LEASED = (OperationStatus.IN_FLIGHT, OperationStatus.VERIFY_FAILED)


class RollbackKind(models.TextChoices):
    IN_BAND = "in_band", "in-band undo"
    COMPENSATING = "compensating", "compensating operation"
    OUT_OF_BAND = "out_of_band", "out-of-band alert"
    NONE = "none", "none"


# What nothing Oversight does can undo: approving one takes the typed challenge on its
# page (the operation's id, typed), never a press elsewhere (e.g. in Slack).
IRREVERSIBLE = (RollbackKind.OUT_OF_BAND, RollbackKind.NONE)


class Executor(models.TextChoices):
    """Who carries the operation out once approved."""

    SERVER = "server", "Oversight's workers"
    AGENT = "agent", "the agent itself"


class Operation(models.Model):
    """One effect to attempt and to recognise later (seed 002). Status changes only
    through ``runs.transitions``; ``version`` guards each change, ``fencing_epoch``
    guards the worker that holds the lease."""

    Status = OperationStatus
    Risk = Risk
    RollbackKind = RollbackKind
    Executor = Executor

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="operations")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="operations")
    call_id = models.CharField(max_length=200)
    # The agent's own name for it (a framework's interrupt id…): unique per token.
    external_id = models.CharField(max_length=200, blank=True, default="")
    action = models.CharField(max_length=100)
    # Why the agent proposes it, in its words: shown to reviewers, never trusted.
    summary = models.CharField(max_length=300, blank=True, default="")
    rationale = models.TextField(blank=True, default="")
    # As the agent proposed them, kept for the diff when a reviewer edits.
    proposed_arguments = models.JSONField()
    arguments = models.JSONField()
    arguments_hash = models.CharField(max_length=64)
    # ``proposed_arguments``' hash ("" for operations proposed before migration 0042): with
    # ``arguments_hash``, how the same call made again is found (``services.repeats``).
    proposed_hash = models.CharField(max_length=64, blank=True, default="", db_default="")
    idempotency_key = models.CharField(max_length=64, unique=True)
    risk = models.CharField(max_length=8, choices=Risk.choices, default=Risk.MEDIUM)
    # The risk the agent said; ``risk`` is that raised to the policy's minimum, never lower.
    proposed_risk = models.CharField(max_length=8, choices=Risk.choices, blank=True)
    rollback_kind = models.CharField(max_length=16, choices=RollbackKind.choices)
    executor = models.CharField(max_length=8, choices=Executor.choices, default=Executor.SERVER)
    # The target the effect waits on (``Action.lane``), kept with the arguments: a
    # worker claims nothing of a lane that is full or whose target stopped answering.
    lane = models.CharField(max_length=300, blank=True, default="", db_default="")
    # What it would do, in one line, from its arguments (``Action.gist``): the queue's row.
    gist = models.CharField(max_length=200, blank=True, default="", db_default="")
    # What it acts on that others may too, from its arguments (``Action.target``: an
    # account, a file, a host; "" for nothing shared): its page lists the others
    # waiting on the same target, and what they would do together.
    target = models.CharField(max_length=200, blank=True, default="", db_default="")
    required_approvals = models.PositiveSmallIntegerField()
    approval_rule = models.CharField(
        max_length=300, blank=True, help_text="The policy rule that set risk and approvals."
    )
    # The token that proposed it: a person it acts for may not decide on it.
    proposed_by_token = models.ForeignKey(
        AgentToken, null=True, blank=True, on_delete=models.PROTECT, related_name="proposals"
    )
    # The run version the agent had read when it proposed.
    base_version = models.PositiveIntegerField()
    # An operator's requeue (runs.services.requeues): the operation of its run, whose
    # effect did not happen, that this one proposes again after a fix (one requeue each:
    # its call_id is "requeue-of-<id>"), who requeued it (who may then not decide on
    # it) and why. The one requeued stays as it ended.
    requeue_of = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.RESTRICT,
        related_name="requeues",
        db_index=False,
    )
    requeued_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,
    )
    requeue_reason = models.TextField(blank=True, default="", db_default="")
    status = models.CharField(max_length=24, choices=Status.choices, default=Status.PROPOSED)
    status_reason = models.TextField(blank=True, default="")
    version = models.PositiveIntegerField(default=1)
    expires_at = models.DateTimeField(help_text="Deadline for a decision.")
    approved_at = models.DateTimeField(null=True, blank=True)
    approval_expires_at = models.DateTimeField(null=True, blank=True)
    lease_owner = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    fencing_epoch = models.PositiveIntegerField(default=0)
    # Claims so far (each lease taken counts one): an operation that keeps failing
    # unexpectedly ends after OVERSIGHT_MAX_ATTEMPTS instead of looping forever.
    attempts = models.PositiveIntegerField(default=0)
    # What the executor captured before firing the effect (e.g. the previous version of
    # a file), needed to verify and to roll back after a crash.
    intent = models.JSONField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True, help_text="The observation the agent reads.")
    # How long the effect and its verification took (ms), as the worker that recorded the
    # result measured them (/metrics); left empty where the agent executes.
    execution_ms = models.PositiveIntegerField(null=True, blank=True)
    verification_ms = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "call_id"], name="operation_unique_call"),
            *named_per_token("operation", "proposed_by_token"),
            choices_constraint("status", OperationStatus, "operation_status_valid"),
            choices_constraint("risk", Risk, "operation_risk_valid"),
            choices_constraint("rollback_kind", RollbackKind, "operation_rollback_valid"),
            choices_constraint("executor", Executor, "operation_executor_valid"),
            models.CheckConstraint(
                condition=models.Q(required_approvals__lte=2), name="operation_approvals_range"
            ),
            models.CheckConstraint(
                condition=~models.Q(status="approved")
                | models.Q(approval_expires_at__isnull=False),
                name="operation_approval_expires",
            ),
        ]
        indexes = [
            # The approvals queue and the expiry sweep: proposed operations, oldest first.
            models.Index(
                fields=["project", "created_at"],
                condition=models.Q(status="proposed"),
                name="operation_pending_idx",
            ),
            # The queue's count and version (how many wait, the latest change), read from
            # the index alone: from the table, 10,000 pending took 4 ms at every poll.
            models.Index(
                fields=["project", "updated_at", "status"],
                condition=models.Q(status="proposed"),
                name="operation_queue_version_idx",
            ),
            # The queue across all of a reviewer's projects, oldest first: the page reads
            # only its first rows instead of sorting every pending operation.
            models.Index(
                fields=["created_at", "id"],
                condition=models.Q(status="proposed"),
                name="operation_queue_idx",
            ),
            # The others waiting on an operation's target, on its page, oldest first:
            # WHERE project_id = ? AND target = ? AND status = 'proposed'.
            models.Index(
                fields=["project", "target", "created_at"],
                condition=models.Q(status="proposed"),
                name="operation_target_idx",
            ),
            models.Index(
                fields=["expires_at"],
                condition=models.Q(status="proposed"),
                name="operation_decision_due_idx",
            ),
            # Workers claim approved operations in order:
            # WHERE status='approved' AND executor='server' ORDER BY id.
            models.Index(
                fields=["id"],
                condition=models.Q(status="approved", executor="server"),
                name="operation_ready_idx",
            ),
            # Approvals that lapse before a worker takes them (WHERE status = 'approved'
            # AND approval_expires_at <= now), and on SQLite the claim of those that
            # have not (> now).
            models.Index(
                fields=["approval_expires_at"],
                condition=models.Q(status="approved"),
                name="operation_approval_due_idx",
            ),
            # Workers take over operations whose lease expired mid-execution or mid-rollback,
            # and the sweep settles agents' that did: WHERE status IN ('in_flight',
            # 'verify_failed') AND lease_expires_at <= now. Only leased operations have an
            # expiry; SQLite can tell a partial index on IS NOT NULL serves such a query,
            # not one on the status list.
            models.Index(
                fields=["status", "lease_expires_at"],
                condition=models.Q(lease_expires_at__isnull=False),
                name="operation_leased_idx",
            ),
            models.Index(fields=["run", "status"], name="operation_run_status_idx"),
            # The requeues of an operation: SQLite looks for them at every insert into
            # this table (a foreign key to itself, deferred), which read it whole.
            models.Index(
                fields=["requeue_of"],
                condition=models.Q(requeue_of__isnull=False),
                name="operation_requeue_of_idx",
            ),
        ]
        permissions = [
            ("decide_operation", "Can approve, reject or edit operations"),
            ("requeue_operation", "Can propose again an operation whose effect did not happen"),
        ]

    def __str__(self) -> str:
        return f"operation {self.pk} {self.action} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return machines.OPERATION.is_terminal(self.status)


class DecisionKind(models.TextChoices):
    APPROVE = "approve"
    EDIT = "edit", "edit and approve"
    REJECT = "reject"
    REPLY = "reply", "reject with reply"


class DecisionQuerySet(models.QuerySet):
    def counted_approvals(self) -> "DecisionQuerySet":
        """The approvals that count: given on the operation's current arguments, with
        no edit after them. Every edit changes the arguments (an edit that changes
        nothing is recorded as a plain approval), so an edit retracts all approvals
        before it, even if a later edit restores the arguments they were given on;
        the edit itself is its reviewer's approval of the new arguments. Decisions on
        an operation are written one at a time under its run's lock, so a higher id
        is a later decision."""
        later_edit = Decision.objects.filter(
            operation=models.OuterRef("operation"),
            kind=DecisionKind.EDIT,
            pk__gt=models.OuterRef("pk"),
        )
        return self.filter(
            ~models.Exists(later_edit),
            kind__in=Decision.APPROVING,
            arguments_hash=models.F("operation__arguments_hash"),
        )


class Decision(models.Model):
    """A reviewer's (or a policy's) decision, bound to the arguments hash it saw."""

    Kind = DecisionKind

    APPROVING = (Kind.APPROVE, Kind.EDIT)

    operation = models.ForeignKey(Operation, on_delete=models.PROTECT, related_name="decisions")
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="decisions",
    )
    policy = models.CharField(
        max_length=200, blank=True, default="", help_text="The policy that decided, if no person."
    )
    kind = models.CharField(max_length=8, choices=Kind.choices)
    arguments_hash = models.CharField(max_length=64, help_text="The arguments decided upon.")
    preview_sha256 = models.CharField(
        max_length=64,
        blank=True,
        default="",
        help_text="The preview of the effect the reviewer was shown (an artifact), if any.",
    )
    edited_arguments = models.JSONField(null=True, blank=True)
    comment = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = DecisionQuerySet.as_manager()

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            choices_constraint("kind", DecisionKind, "decision_kind_valid"),
            # Exactly one decider: a person, or a named policy.
            models.CheckConstraint(
                condition=(models.Q(reviewer__isnull=False) & models.Q(policy=""))
                | (models.Q(reviewer__isnull=True) & ~models.Q(policy="")),
                name="decision_one_decider",
            ),
            # A rejection always says why; a reply always says something.
            models.CheckConstraint(
                condition=~models.Q(kind__in=["reject", "reply"]) | ~models.Q(comment=""),
                name="decision_rejection_has_reason",
            ),
            models.CheckConstraint(
                condition=~models.Q(kind="edit") | models.Q(edited_arguments__isnull=False),
                name="decision_edit_has_arguments",
            ),
        ]
        indexes = [models.Index(fields=["reviewer", "created_at"], name="decision_reviewer_idx")]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} by {self.reviewer or self.policy}"
