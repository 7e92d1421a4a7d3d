"""What goes in and out of the agent API. Field names are the API's contract."""

from datetime import datetime
from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import AfterValidator, Field

from runs import machines
from runs.errors import InvalidInput
from runs.models import Decision, FeedEvent, Operation, Run, Session
from runs.recovery import recovery_report
from runs.services.artifacts import MEDIA_TYPE, MEDIA_TYPE_MAX


class Problem(Schema):
    error: str = Field(description="A stable code: stale_version, run_closed, …")
    detail: str = Field(description="What was wrong, for a person.")
    field: str | None = Field(default=None, description="The request field at fault, if one.")
    request_id: str | None = Field(
        default=None,
        description="This request's id, also in the X-Request-ID header and in every "
        "server log line of the request: quote it when reporting the error.",
    )


EXTERNAL_ID = (
    "Your own name for it (a framework's thread or interrupt id), unique among this "
    "token's objects of its kind (another token's names are its own, and never seen); "
    '"" for none. Creating again with the same one answers 200 with the existing object '
    "if the request describes the same thing, else 409 external_id_conflict."
)


def external_id_field():
    return Field(default="", max_length=200, description=EXTERNAL_ID)


class SessionIn(Schema):
    title: str = Field(default="", max_length=300)
    agent: str = Field(default="", max_length=200, description="Default: the token's name.")
    external_id: str = external_id_field()


class SessionOut(Schema):
    id: int
    project: str
    agent: str
    title: str
    owner: str
    external_id: str

    @staticmethod
    def of(session: Session) -> "SessionOut":
        return SessionOut(
            id=session.pk,
            project=session.project.slug,
            agent=session.agent,
            title=session.title,
            owner=session.owner.get_username(),
            external_id=session.external_id,
        )


class RunIn(Schema):
    session: int
    goal: str = Field(min_length=1, max_length=20_000)
    retry_of: int | None = None
    external_id: str = external_id_field()


class FinishIn(Schema):
    status: Literal["completed", "partial", "failed"]
    outcome: str = Field(default="", max_length=4000)
    base_version: int | None = Field(default=None, description="Refuse if the run moved on.")


class MessageIn(Schema):
    kind: Literal["user", "agent", "tool", "system"] = Field(
        default="agent",
        description="system is Oversight's own (refused, 422); a user message is shown as "
        "reported by this agent, never as the user's own words.",
    )
    payload: dict[str, Any]
    schema_version: int = 1


class MessageOut(Schema):
    seq: int
    run_version: int


class MessageRead(Schema):
    seq: int
    at: datetime
    kind: str
    author: str
    author_kind: str = Field(description="agent, user (a person), worker or policy.")
    payload: dict[str, Any]


class ProposalIn(Schema):
    call_id: str = Field(min_length=1, max_length=200)
    action: str = Field(min_length=1, max_length=100)
    arguments: dict[str, Any]
    risk: Literal["low", "medium", "high"] = "medium"
    rollback_kind: Literal["in_band", "compensating", "out_of_band", "none"]
    base_version: int = Field(ge=0, description="The run version this proposal is based on.")
    external_id: str = external_id_field()
    summary: str = Field(
        default="", max_length=300, description="What it does, in a line, for the reviewer."
    )
    rationale: str = Field(
        default="", max_length=20_000, description="Why it is needed: the model's reasoning."
    )


class WithdrawIn(Schema):
    reason: str = Field(default="", max_length=4000)


class DecisionOut(Schema):
    kind: str
    by: str
    comment: str
    arguments_hash: str
    at: datetime


class LeaseOut(Schema):
    owner: str
    epoch: int
    expires_at: datetime | None


class OperationOut(Schema):
    id: int
    run: int
    call_id: str
    action: str
    arguments: dict[str, Any]
    arguments_hash: str
    proposed_arguments: dict[str, Any]
    risk: str = Field(description="The effective risk: the agent's, raised by the policy.")
    proposed_risk: str = Field(description="The risk the agent proposed.")
    rollback_kind: str
    executor: Literal["server", "agent"]
    status: str
    status_reason: str
    result: Any = None
    output: Any = Field(
        default=None,
        description="The committed effect's output, whoever executed it (null until committed).",
    )
    external_id: str
    summary: str
    rationale: str
    idempotency_key: str
    required_approvals: int
    decisions: list[DecisionOut]
    lease: LeaseOut
    version: int
    run_version: int
    expires_at: datetime
    requeue_of: int | None = Field(
        default=None,
        description="The operation of this run that this one proposes again, when an "
        "operator requeued it after a fix (its effect had not happened).",
    )

    @staticmethod
    def of(operation: Operation) -> "OperationOut":
        return OperationOut(
            **{field: getattr(operation, field) for field in OPERATION_FIELDS},
            run=operation.run_id,
            requeue_of=operation.requeue_of_id,
            decisions=[
                DecisionOut(
                    kind=d.kind,
                    by=d.reviewer.get_username() if d.reviewer else f"policy:{d.policy}",
                    comment=d.comment,
                    arguments_hash=d.arguments_hash,
                    at=d.created_at,
                )
                for d in Decision.objects.filter(operation=operation).select_related("reviewer")
            ],
            lease=LeaseOut(
                owner=operation.lease_owner,
                epoch=operation.fencing_epoch,
                expires_at=operation.lease_expires_at,
            ),
            run_version=Run.objects.values_list("version", flat=True).get(pk=operation.run_id),
            output=committed_output(operation),
        )


def committed_output(operation: Operation) -> Any:
    """What the effect returned (a worker's ``execute``, the agent's report): the same
    shape for both executors, kept for a repeated call and for recovery."""
    if operation.status != Operation.Status.COMMITTED or not isinstance(operation.result, dict):
        return None
    return operation.result.get("output")


OPERATION_FIELDS = [
    "id",
    "call_id",
    "action",
    "arguments",
    "arguments_hash",
    "proposed_arguments",
    "risk",
    "proposed_risk",
    "rollback_kind",
    "executor",
    "status",
    "status_reason",
    "result",
    "external_id",
    "summary",
    "rationale",
    "idempotency_key",
    "required_approvals",
    "version",
    "expires_at",
]


class RecoveryOut(Schema):
    case: Literal["no_decision", "decision_no_result", "result_and_checkpoint"]
    guidance: str
    operations: list[dict[str, Any]]


class RunOut(Schema):
    id: int
    session: int
    external_id: str
    goal: str
    status: str
    reason: str
    unblock: str
    outcome: str
    version: int
    cancel_requested: bool
    retry_of: int | None
    recovery: RecoveryOut
    pending_operations: list[OperationOut]

    @staticmethod
    def of(run: Run) -> "RunOut":
        report = recovery_report(run)
        pending = run.operations.exclude(status__in=TERMINAL).order_by("pk")
        return RunOut(
            id=run.pk,
            session=run.session_id,
            external_id=run.external_id,
            goal=run.goal,
            status=run.status,
            reason=run.reason,
            unblock=run.unblock,
            outcome=run.outcome,
            version=run.version,
            cancel_requested=run.cancel_requested,
            retry_of=run.retry_of_id,
            recovery=RecoveryOut(
                case=report.case.value, guidance=report.guidance, operations=report.operations
            ),
            pending_operations=[OperationOut.of(op) for op in pending],
        )


TERMINAL = machines.OPERATION.terminal


class CheckpointOut(Schema):
    seq: int
    at: datetime
    event: str
    from_status: str
    to_status: str
    actor_kind: str
    actor: str
    reason: str
    operation: int | None
    state: dict[str, Any]
    hash: str
    prev_hash: str


class EventOut(Schema):
    """A checkpoint of one of the token's runs, as its feed shows it."""

    seq: int = Field(description="The event's place in this token's feed: 1, 2, 3…")
    at: datetime
    run: int
    run_external_id: str
    event: str = Field(description="run.status, operation.status, request.status, …")
    from_status: str
    to_status: str
    reason: str
    actor_kind: str
    actor: str
    operation: int | None
    call_id: str | None
    operation_external_id: str | None
    request: int | None
    request_external_id: str | None

    @staticmethod
    def of(entry: FeedEvent) -> "EventOut":
        c = entry.checkpoint
        op, req = c.operation, c.request
        return EventOut(
            seq=entry.seq,
            at=c.created_at,
            run=c.run_id,
            run_external_id=c.run.external_id,
            event=c.event,
            from_status=c.from_status,
            to_status=c.to_status,
            reason=c.reason,
            actor_kind=c.actor_kind,
            actor=c.actor_label,
            operation=c.operation_id,
            call_id=op.call_id if op else None,
            operation_external_id=op.external_id if op else None,
            request=c.request_id,
            request_external_id=req.external_id if req else None,
        )


class EventsOut(Schema):
    events: list[EventOut]
    cursor: int = Field(description="Send it as ``after`` next: the last seq returned.")


class ActionOut(Schema):
    name: str
    description: str
    executor: Literal["server"]
    rollback_kinds: list[str] = Field(description="What rollback_kind a proposal may give.")
    arguments_schema: dict[str, Any] = Field(description="The JSON Schema of its arguments.")
    precondition: str = Field(description="What is checked on the target before it fires.")


class ArtifactIn(Schema):
    name: str = Field(min_length=1, max_length=500)
    media_type: Annotated[
        str,
        Field(
            max_length=MEDIA_TYPE_MAX,
            pattern=MEDIA_TYPE,
            description="type/subtype, no parameters; kept lowercase, for this reference only.",
        ),
        AfterValidator(str.lower),
    ] = "application/octet-stream"
    content_base64: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="Checked against the bytes.")


class ArtifactOut(Schema):
    name: str
    sha256: str
    size: int
    media_type: str
    run_version: int


# How long a lease lasts from now, when claimed or renewed.
LeaseSeconds = Annotated[int, Field(ge=1, le=3600)]


class ClaimIn(Schema):
    executor: str = Field(default="", max_length=200, description="Who executes (logged).")
    lease_seconds: LeaseSeconds = 60


class ClaimOut(Schema):
    operation: int
    status: Literal["in_flight", "verify_failed"] = Field(
        description="in_flight; verify_failed when an earlier executor reported an "
        "uncertain effect and its rollback is still due."
    )
    epoch: int
    lease_expires_at: datetime
    lease_seconds: int = Field(description="The lease's length: renew it by as much.")
    idempotency_key: str
    arguments: dict[str, Any]
    intent: dict[str, Any] | None = Field(
        description="What an earlier executor recorded before firing: the effect may exist."
    )


class HeartbeatIn(Schema):
    epoch: int
    lease_seconds: LeaseSeconds = Field(description="Renew the lease for this long from now.")


class IntentIn(Schema):
    epoch: int
    snapshot: dict[str, Any] = Field(default_factory=dict)
    deduplicates: bool = Field(
        default=False,
        description="The target deduplicates on the operation's idempotency key, so that "
        "a late repeat of an earlier attempt is harmless: only then is a step whose intent "
        "another epoch recorded taken again.",
    )


class ReportIn(Schema):
    epoch: int
    effect: Literal["applied", "absent", "uncertain"] | None = Field(
        default=None,
        description="What re-reading the target showed: the effect is there, it did not "
        "happen (and cannot happen later), or it cannot be told.",
    )
    verified: bool | None = Field(
        default=None,
        description="The older form: true is applied, false is uncertain. With effect, it "
        "must agree (true only for applied).",
    )
    output: Any = None
    error: str = Field(default="", max_length=4000)

    def reported_effect(self) -> str:
        """The effect reported, from ``effect`` or ``verified``; ``InvalidInput`` if
        neither is given or they disagree."""
        if self.effect is None and self.verified is None:
            raise InvalidInput("effect: say applied, absent or uncertain (or give verified)")
        if self.effect is None:
            return "applied" if self.verified else "uncertain"
        if self.verified is not None and self.verified != (self.effect == "applied"):
            raise InvalidInput(f"verified: {self.verified} does not agree with {self.effect}")
        return self.effect


class RollbackIn(Schema):
    epoch: int
    outcome: Literal["rolled_back", "compensated", "alert"]
    detail: str = Field(default="", max_length=4000)
