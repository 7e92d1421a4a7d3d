from django.db.models import QuerySet
from django.utils.functional import SimpleLazyObject

from oversight.version import VERSION
from runs.models import Alert, HumanRequest, Operation
from runs.permissions import projects_with_perm
from runs.queue import approved_by
from runs.replica import on_primary

# What the navigation's badges count, defined once: the overview counts the same per
# project (``runs.views.home``), so that its numbers add up to the badges.


def waiting_operations(user) -> QuerySet[Operation]:
    """Proposals awaiting ``user``'s decision (counted in projects where they decide):
    not those they approved as they stand, which wait for a second reviewer."""
    return Operation.objects.filter(status=Operation.Status.PROPOSED).exclude(
        pk__in=approved_by(user)
    )


def waiting_requests() -> QuerySet[HumanRequest]:
    """Agents' questions awaiting an answer (counted where the user decides)."""
    return HumanRequest.objects.filter(status=HumanRequest.Status.OPEN)


def open_alerts() -> QuerySet[Alert]:
    """Alerts not resolved yet (counted in projects where the user may view alerts)."""
    return Alert.objects.unresolved()


def navigation(request) -> dict:
    """The counts in the navigation: decisions waiting for me (proposals and human
    requests, shown to reviewers only), alerts open in my projects. Each is counted
    when a page shows it, unless the page counted it already (the approvals queue and
    the overview put their own ``nav_pending`` and ``nav_alerts`` in their context,
    which takes precedence)."""
    user = request.user
    if not user.is_authenticated:
        return {}
    deciding = list(projects_with_perm(user, "decide_operation").values_list("pk", flat=True))
    # One query for both: UNION ALL of the two kinds' keys, counted.
    pending = (
        waiting_operations(user)
        .filter(project__in=deciding)
        .values("pk")
        .union(waiting_requests().filter(project__in=deciding).values("pk"), all=True)
    )
    alerts = open_alerts().filter(project__in=projects_with_perm(user, "view_alert"))
    return {
        "can_review": bool(deciding),
        "nav_pending": SimpleLazyObject(lambda: on_primary(pending.count) if deciding else 0),
        "nav_alerts": SimpleLazyObject(lambda: on_primary(alerts.count)),
    }


def version(request) -> dict:
    """The server's version, for every page's footer (the sign-in page's too)."""
    return {"oversight_version": VERSION}
