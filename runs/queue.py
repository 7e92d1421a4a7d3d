"""What waits for a reviewer: the operations and the human requests awaiting a decision
in the projects where they decide, and the oldest of them, which the queue shows."""

from django.db.models import F, Q, Subquery

from runs.models import Decision, HumanRequest, Operation
from runs.permissions import excluding_own_interest, projects_with_perm

# The queue shows this many operations a page, and as many requests, oldest first: a
# reviewer works from the top; the next pages and the filters find the others. Ten
# thousand rows would be a page of megabytes, rendered again at every change.
QUEUE_LIMIT = 50


def pending_for(user):
    """Operations awaiting a decision in the projects where ``user`` may decide."""
    return Operation.objects.filter(
        status=Operation.Status.PROPOSED,
        project__in=projects_with_perm(user, "decide_operation"),
    )


def approved_by(reviewer):
    """The keys of the operations awaiting a decision that ``reviewer`` approved as they
    stand (on their current arguments): those wait for another reviewer, not for them.
    Read from the reviewer's own decisions since the oldest operation still waiting (a
    range of their index), not looked up for each waiting operation: at 10,000 waiting
    that lookup added 3-5 ms to every page, whose navigation counts what waits."""
    oldest = Operation.objects.filter(status=Operation.Status.PROPOSED).order_by("created_at")
    return Decision.objects.filter(
        reviewer=reviewer,
        kind__in=Decision.APPROVING,
        created_at__gte=Subquery(oldest.values("created_at")[:1]),
        operation__status=Operation.Status.PROPOSED,
        arguments_hash=F("operation__arguments_hash"),
    ).values("operation_id")


def open_requests_for(user):
    """Human requests awaiting an answer in the projects where ``user`` may decide."""
    return HumanRequest.objects.filter(
        status=HumanRequest.Status.OPEN,
        project__in=projects_with_perm(user, "decide_operation"),
    )


def oldest_keys(queryset, page: int = 1):
    """The keys of ``queryset``'s ``page``-th ``QUEUE_LIMIT``, oldest first: what the
    queue shows."""
    start = (page - 1) * QUEUE_LIMIT
    keys = queryset.order_by("created_at", "pk").values_list("pk", flat=True)
    return keys[start : start + QUEUE_LIMIT]


def oldest(queryset, page: int = 1):
    """``queryset``'s ``page``-th ``QUEUE_LIMIT``, oldest first, chosen by their keys
    alone, so that what a row shows (its run, agent, project, approvals so far) is read
    for those rows only, not for every pending one before the cut."""
    chosen = oldest_keys(queryset, page)
    return queryset.model.objects.filter(pk__in=chosen).order_by("created_at", "pk")


def next_waiting(reviewer, after: Operation | HumanRequest, *, back: bool = False):
    """What waits for ``reviewer``'s decision next in the queue's order (oldest first)
    after ``after`` (before it, ``back``), going round to the other end past the last:
    of the same kind (operation or request), waiting in a project where they decide,
    not in their own run nor from their own token nor requeued by them, and not
    approved by them as it stands. So ``n`` walks forward through the queue and ``k``
    back, instead of always opening the oldest (which, from the oldest, went back and
    forth between the first two). Their own token is one that acts for them or that
    they issued (``permissions.own_interest``)."""
    if isinstance(after, HumanRequest):
        items, approved = open_requests_for(reviewer), None
    else:
        items, approved = pending_for(reviewer), approved_by(reviewer)
    theirs = excluding_own_interest(items, reviewer)
    if approved is not None:
        theirs = theirs.exclude(pk__in=approved)
    side, order = ("lt", ("-created_at", "-pk")) if back else ("gt", ("created_at", "pk"))
    beyond = Q(**{f"created_at__{side}": after.created_at}) | Q(
        created_at=after.created_at, **{f"pk__{side}": after.pk}
    )
    shown = theirs.order_by(*order).only("pk", "action" if approved is not None else "prompt")
    return _first_theirs(items, shown, beyond, order) or _first_theirs(
        items, shown, ~Q(pk=after.pk), order
    )


def _first_theirs(items, theirs, where: Q, order):
    """The first of ``items`` that are ``where``, in ``order``, that is among ``theirs``.
    Looked for among the first ``QUEUE_LIMIT``, chosen by key, so that the conditions
    are checked on those and not on every pending one before the first is known (at
    10,000 pending, 17 ms on SQLite, whose planner sorted them all); among all of them
    only if more wait and none of those is the reviewer's (they approved each, or their
    agents proposed them)."""
    first = list(items.filter(where).order_by(*order).values_list("pk", flat=True)[:QUEUE_LIMIT])
    found = theirs.filter(pk__in=first).first()
    if found is None and len(first) == QUEUE_LIMIT:  # More wait beyond these.
        found = theirs.filter(where).first()
    return found
