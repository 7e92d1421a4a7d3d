"""The same call made again: the operations of a run with the same action and
arguments as another, as proposed or as approved on either side (a reviewer's edit
changes one hash, and an agent retrying a call carries what it first proposed). An
agent that lost track of a call (its process killed while the call ran, say) may
propose it again under a new call id: its reviewers see the earlier ones, and a
requeue is refused once the same was proposed again (``services.requeues``)."""

from django.db.models import Q, QuerySet

from runs.canonical import json_hash
from runs.models import Operation

SHOWN = 5  # the earlier calls an operation's page lists, at most
Status = Operation.Status
# What an earlier call's status means to a reviewer of the same call made again.
MEANING = {
    Status.COMMITTED: "its effect happened: approving this one makes it twice",
    Status.IN_FLIGHT: "its effect may have happened (the agent stopped, or is on it): "
    "approving this one may make it twice",
    Status.VERIFY_FAILED: "its effect may have happened and is being rolled back",
    Status.ALERTED: "its effect may have happened: a person is reconciling it; "
    "approving this one may make it twice",
    Status.ROLLED_BACK: "its effect happened and was undone",
    Status.COMPENSATED: "its effect happened and was compensated",
    Status.PROPOSED: "it waits for reviewers too",
    Status.APPROVED: "it is approved and not made yet",
}
ENDED_WITHOUT = "it ended without its effect"


def same_calls(operation: Operation) -> QuerySet[Operation]:
    """The other operations of ``operation``'s run that make the same call."""
    # "" is no hash: an operation proposed before the column was is hashed here, and
    # the others of its kind are found by their approved arguments only.
    proposed = operation.proposed_hash or json_hash(operation.proposed_arguments)
    same = {operation.arguments_hash, proposed}
    return (
        Operation.objects.filter(run_id=operation.run_id, action=operation.action)
        .filter(Q(arguments_hash__in=same) | Q(proposed_hash__in=same))
        .exclude(pk=operation.pk)
    )


def made_before(operation: Operation) -> list[tuple[Operation, str]]:
    """The latest earlier operations that make the same call, newest first, each with
    what it means for this one: what an operation's reviewers are shown."""
    earlier = same_calls(operation).filter(pk__lt=operation.pk).order_by("-pk")
    shown = earlier.only("pk", "run_id", "call_id", "status")[:SHOWN]
    return [(before, MEANING.get(before.status, ENDED_WITHOUT)) for before in shown]
