"""The invariants the whole product rests on, checked against the database as it is.

Each check yields one line per violation, naming the object, so that
``manage.py check_invariants`` can print them all and fail."""

from collections.abc import Callable, Iterator

from django.db import transaction
from django.db.models import Count, Exists, F, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce

from runs import artifact_store, machines
from runs.actions.registry import get_action, parse_arguments
from runs.chain import verify_all_chains
from runs.errors import InvalidInput
from runs.models import Artifact, Checkpoint, Decision, Operation, Run
from runs.transitions import PENDING_FIELDS, lock_run

# Statuses an operation reaches only after a worker took it for execution.
EXECUTED = (
    Operation.Status.IN_FLIGHT,
    Operation.Status.COMMITTED,
    Operation.Status.PRECONDITION_FAILED,
    Operation.Status.VERIFY_FAILED,
    Operation.Status.FAILED,
    Operation.Status.ROLLED_BACK,
    Operation.Status.COMPENSATED,
    Operation.Status.ALERTED,
)


def executed_operations_were_approved() -> Iterator[str]:
    counted = Decision.objects.counted_approvals().filter(operation=OuterRef("pk")).order_by()
    people = (
        counted.filter(reviewer__isnull=False)
        .values("operation")
        .annotate(people=Count("reviewer", distinct=True))
        .values("people")
    )
    operations = (
        Operation.objects.filter(status__in=EXECUTED)
        .annotate(
            people=Coalesce(Subquery(people), 0),
            by_policy=Exists(counted.filter(reviewer__isnull=True)),
        )
        .filter(
            Q(people__lt=F("required_approvals"))
            | Q(required_approvals=0, people=0, by_policy=False)
        )
    )
    for op in operations.order_by("pk"):
        yield (
            f"operation {op.pk} ({op.action}) is {op.status} with {op.people} of the "
            f"{op.required_approvals} approvals its policy requires"
        )


def no_idempotency_key_executed_twice() -> Iterator[str]:
    repeated = (
        Checkpoint.objects.filter(to_status=Operation.Status.IN_FLIGHT, event="operation.status")
        .values("operation__idempotency_key")
        .annotate(times=Count("pk"))
        .filter(times__gt=1)
    )
    for row in repeated:
        yield (
            f"idempotency key {row['operation__idempotency_key']} was taken for execution "
            f"{row['times']} times"
        )


def no_effect_fired_twice_where_it_could_apply_twice() -> Iterator[str]:
    """Every firing is preceded by an intent checkpoint naming its epoch. Two epochs may
    fire one operation only against a target that makes the repeat harmless; anywhere
    else the second could have applied the effect again."""
    fired = (
        Checkpoint.objects.filter(event="operation.intent")
        .values("operation")
        .annotate(times=Count("pk"))
        .filter(times__gt=1)
    )
    twice = Operation.objects.filter(pk__in=fired.values("operation")).order_by("pk")
    for op in twice:
        if _repeat_is_harmless(op):
            continue
        epochs = [
            str((state.get("attempt") or {}).get("epoch", "?"))
            for state in op.checkpoints.filter(event="operation.intent")
            .order_by("seq")
            .values_list("state", flat=True)
        ]
        yield (
            f"operation {op.pk} ({op.action}) fired under epochs {', '.join(epochs)}, against a "
            "target that does not deduplicate: its effect may have happened more than once"
        )


def _repeat_is_harmless(op: Operation) -> bool:
    action = get_action(op.action)
    if action is None or op.executor != Operation.Executor.SERVER:
        return False
    try:
        return action.deduplicates(parse_arguments(action, op.arguments))
    except InvalidInput:
        return False


def checkpoint_chains_unbroken() -> Iterator[str]:
    for broken in verify_all_chains():
        yield f"checkpoint chain broken: {broken}"


def checkpoints_in_their_runs_project() -> Iterator[str]:
    """The project copied onto each checkpoint (for the audit search) is its run's: a
    checkpoint moved to another project would hide from that project's auditors."""
    moved = Checkpoint.objects.exclude(project_id=F("run__project_id")).order_by("pk")
    for checkpoint in moved.values("pk", "run_id", "seq").iterator():
        yield (
            f"checkpoint {checkpoint['pk']} (run {checkpoint['run_id']}, seq "
            f"{checkpoint['seq']}) is filed under another project than its run"
        )


def referenced_artifacts_exist() -> Iterator[str]:
    for artifact in Artifact.objects.filter(refs__isnull=False).distinct().iterator():
        try:
            stored = artifact_store.size(artifact.sha256)
        except artifact_store.ArtifactMissing:
            yield f"artifact {artifact.sha256} is referenced by a checkpoint but missing"
            continue
        if stored != artifact.size:
            yield f"artifact {artifact.sha256} has {stored} bytes, not {artifact.size}"


def waiting_runs_have_reason() -> Iterator[str]:
    for run in Run.objects.filter(status=Run.Status.WAITING).filter(Q(reason="") | Q(unblock="")):
        yield f"run {run.pk} is waiting without a reason and what unblocks it"


def closed_runs_have_no_open_proposals() -> Iterator[str]:
    operations = Operation.objects.filter(
        status__in=(Operation.Status.PROPOSED, Operation.Status.APPROVED),
        run__status__in=machines.RUN.terminal,
    )
    for op in operations.order_by("pk"):
        yield f"operation {op.pk} is {op.status} but its run {op.run_id} has ended"


def latest_states_show_the_unfinished_operations() -> Iterator[str]:
    """Each checkpoint carries the run's unfinished operations forward from the one
    before (``runs.transitions``): a change to an operation that bypassed its own
    checkpoint would leave every later state wrong. The latest one must list exactly
    the operations not yet finished, as they are, with as many approvals as count."""
    actual = unfinished_operations()
    latest = Checkpoint.objects.filter(seq=F("run__version")).order_by("run_id")
    for run_id, state in latest.values_list("run_id", "state").iterator():
        if as_shown(state) != actual.get(run_id, {}):
            yield from _state_drift(run_id)


def _state_drift(run_id: int) -> Iterator[str]:
    """Compare again under the run's lock: a transition that committed between the
    reads above is no drift."""
    with transaction.atomic():
        seq = lock_run(run_id).version
        shown = as_shown(Checkpoint.objects.get(run_id=run_id, seq=seq).state)
        actual = unfinished_operations(run_id).get(run_id, {})
    for op_id in sorted(shown.keys() | actual.keys()):
        if shown.get(op_id) != actual.get(op_id):
            yield (
                f"run {run_id}: its latest checkpoint (seq {seq}) shows operation {op_id} as "
                f"{_described(shown.get(op_id))}, but it is {_described(actual.get(op_id))}"
            )


def unfinished_operations(run_id: int | None = None) -> dict[int, dict[int, dict]]:
    """The operations not yet finished (of one run, or all), by run and id, as
    ``as_shown`` puts a checkpoint's, counted afresh."""
    operations = Operation.objects.exclude(status__in=machines.OPERATION.terminal)
    if run_id is not None:
        operations = operations.filter(run_id=run_id)
    found: dict[int, dict[int, dict]] = {}
    for op in operations.order_by("id").values("run_id", *PENDING_FIELDS).iterator():
        run = op.pop("run_id")
        found.setdefault(run, {})[op["id"]] = {**op, "approvals": 0}
    by_id = {op_id: op for ops in found.values() for op_id, op in ops.items()}
    counted = Decision.objects.filter(operation__in=operations).counted_approvals()
    for op_id in counted.values_list("operation_id", flat=True):
        by_id[op_id]["approvals"] += 1
    return found


def as_shown(state: dict) -> dict[int, dict]:
    """A checkpoint state's unfinished operations by id, their approvals counted (the
    names are of that moment: a reviewer may have been renamed since)."""
    shown = {}
    for op in state.get("pending_operations", []):
        fields = {field: op[field] for field in PENDING_FIELDS}
        shown[op["id"]] = {**fields, "approvals": len(op["approved_by"])}
    return shown


def _described(op: dict | None) -> str:
    if op is None:
        return "finished (or absent)"
    return f"{op['status']} with {op['approvals']} approval(s)"


CHECKS: list[Callable[[], Iterator[str]]] = [
    executed_operations_were_approved,
    no_idempotency_key_executed_twice,
    no_effect_fired_twice_where_it_could_apply_twice,
    checkpoint_chains_unbroken,
    checkpoints_in_their_runs_project,
    referenced_artifacts_exist,
    waiting_runs_have_reason,
    closed_runs_have_no_open_proposals,
    latest_states_show_the_unfinished_operations,
]


def violations() -> Iterator[str]:
    for check in CHECKS:
        yield from check()
