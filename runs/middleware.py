import zoneinfo

from django.utils import timezone

from runs.models import Preferences

SESSION_KEY = "oversight_time_zone"


class UserTimeZoneMiddleware:
    """Show times in the signed-in person's time zone. The zone is read from their
    preferences once and kept in the session, so pages pay no query for it."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        if request.user.is_authenticated:
            name = request.session.get(SESSION_KEY)
            if name is None:
                stored = Preferences.objects.filter(user=request.user).values_list("time_zone")
                name = next(iter(stored), ("UTC",))[0]
                request.session[SESSION_KEY] = name
            timezone.activate(zoneinfo.ZoneInfo(name))
        else:
            timezone.deactivate()
        return self.get_response(request)
