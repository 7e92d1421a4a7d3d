"""The operations waiting on the same target as another (#34): two transfers from one
account may each fit while together they overdraw it, and a reviewer deciding on one is
shown the others and what they would do together (``Action.target``, ``together``)."""

import logging
from dataclasses import dataclass

from django.db.models import Count, Subquery

from runs.actions.base import Action, Arguments, Context, plain_reason
from runs.actions.previews import Together
from runs.actions.registry import get_action, parse_arguments
from runs.errors import InvalidInput
from runs.logs import about
from runs.models import Operation

log = logging.getLogger(__name__)
# The others listed on the page, oldest first; what they would do together is worked
# out from these too, since each one's arguments are read (a file's content up to a
# megabyte): the rest are counted.
SHOWN = 20


@dataclass(frozen=True)
class Siblings:
    """The oldest others waiting on an operation's target, how many more wait beyond
    them, and what they would do together with it (None: nothing to say)."""

    operations: list[Operation]
    more: int
    together: Together | None


def waiting_with(operation: Operation) -> Siblings | None:
    """The others waiting for a decision in ``operation``'s project on its target, while
    it waits too (None: it does not, it names no target, or nothing else waits on it).
    One query, by ``operation_target_idx``, whatever their number: the first rows in the
    index's order, and the count of all of them from the index alone (a window's count
    would read every one's row, arguments and all, to count them)."""
    if operation.status != Operation.Status.PROPOSED or not operation.target:
        return None
    others = Operation.objects.filter(
        project_id=operation.project_id,
        target=operation.target,
        status=Operation.Status.PROPOSED,
    ).exclude(pk=operation.pk)
    counted = others.order_by().values("project_id").annotate(n=Count("pk")).values("n")
    found = list(
        others.select_related("run__session__token")
        .defer("proposed_arguments", "rationale", "intent", "result")
        .annotate(waiting=Subquery(counted))
        .order_by("created_at", "pk")[:SHOWN]
    )
    if not found:
        return None
    return Siblings(found, found[0].waiting - len(found), _together(operation, found))


def _together(operation: Operation, others: list[Operation]) -> Together | None:
    """What ``operation`` and those of ``others`` of its action would do together, read
    from the live target (None: nothing to say, or its action is not Oversight's). Like
    a preview, it never breaks the page: what cannot be worked out is said instead."""
    action = get_action(operation.action)
    if action is None:
        return None
    same = [op for op in (operation, *others) if op.action == operation.action]
    pending = [_parsed(action, op) for op in same]
    if pending[0] is None:
        return None  # Its own page says why its arguments no longer fit.
    pending = [args for args in pending if args is not None]
    if len(pending) < 2:
        return None
    try:
        return action.together(pending, Context(operation))
    except Exception as error:
        with about(run_id=operation.run_id, operation_id=operation.pk):
            log.warning("operation %s: nothing said together: %r", operation.pk, error)
        why = plain_reason(error)
        return Together(f"What they would do together could not be read now: {why}.", False)


def _parsed(action: Action, operation: Operation) -> Arguments | None:
    """``operation``'s arguments as its action reads them (None where they no longer fit
    its schema, e.g. a host since taken off the allowed list)."""
    try:
        return parse_arguments(action, operation.arguments)
    except InvalidInput:
        return None
