from django.db.models import Q
from django.utils.functional import SimpleLazyObject

from oversight.version import VERSION
from runs.models import Alert, HumanRequest, Operation
from runs.permissions import projects_with_perm


def navigation(request) -> dict:
    """The counts in the navigation: decisions waiting for me (proposals and human
    requests, shown to reviewers only), alerts open in my projects. Each is counted
    when a page shows it, unless the page counted it already (the approvals queue puts
    its own ``nav_pending`` in its context, which takes precedence)."""
    user = request.user
    if not user.is_authenticated:
        return {}
    deciding = list(projects_with_perm(user, "decide_operation").values_list("pk", flat=True))
    # One query for both: UNION ALL of the two kinds' keys, counted.
    pending = (
        Operation.objects.filter(status=Operation.Status.PROPOSED, project__in=deciding)
        .values("pk")
        .union(
            HumanRequest.objects.filter(
                status=HumanRequest.Status.OPEN, project__in=deciding
            ).values("pk"),
            all=True,
        )
    )
    return {
        "can_review": bool(deciding),
        "nav_pending": SimpleLazyObject(lambda: pending.count() if deciding else 0),
        "nav_alerts": SimpleLazyObject(
            Alert.objects.filter(
                ~Q(status=Alert.Status.RESOLVED),
                project__in=projects_with_perm(user, "view_alert"),
            ).count
        ),
    }


def version(request) -> dict:
    """The server's version, for every page's footer (the sign-in page's too)."""
    return {"oversight_version": VERSION}
