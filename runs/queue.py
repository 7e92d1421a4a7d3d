"""What waits for a reviewer: the operations and the human requests awaiting a decision
in the projects where they decide, and the oldest of them, which the queue shows."""

from runs.models import HumanRequest, Operation
from runs.permissions import projects_with_perm

# The queue shows the oldest this many operations, and as many requests: a reviewer
# works from the top, and the filters find the others. Ten thousand rows would be a
# page of megabytes, rendered again at every change.
QUEUE_LIMIT = 100


def pending_for(user):
    """Operations awaiting a decision in the projects where ``user`` may decide."""
    return Operation.objects.filter(
        status=Operation.Status.PROPOSED,
        project__in=projects_with_perm(user, "decide_operation"),
    )


def open_requests_for(user):
    """Human requests awaiting an answer in the projects where ``user`` may decide."""
    return HumanRequest.objects.filter(
        status=HumanRequest.Status.OPEN,
        project__in=projects_with_perm(user, "decide_operation"),
    )


def oldest_keys(queryset):
    """The keys of the oldest ``QUEUE_LIMIT`` of ``queryset``: what the queue shows."""
    return queryset.order_by("created_at", "pk").values_list("pk", flat=True)[:QUEUE_LIMIT]


def oldest(queryset):
    """The oldest ``QUEUE_LIMIT`` of ``queryset``, chosen by their keys alone, so that
    what a row shows (its run, agent, project, approvals so far) is read for those rows
    only, not for every pending one before the cut."""
    return queryset.model.objects.filter(pk__in=oldest_keys(queryset)).order_by("created_at", "pk")
