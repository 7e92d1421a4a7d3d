"""Per-request rules for signed-in people: their time zone, how long a session lives,
and that no cache keeps what they were shown."""

import time
import zoneinfo
from datetime import timedelta
from urllib.parse import unquote

from axes.helpers import get_client_ip_address
from axes.utils import reset as reset_failed_sign_ins
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import logout
from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponseBadRequest
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.utils.timesince import timesince
from django_htmx.http import HttpResponseClientRedirect

from runs.api.api import problem
from runs.models import Preferences

SESSION_KEY = "oversight_preferences"  # what the pages need of them: time zone, keys
DEFAULTS = {"time_zone": "UTC", "shortcuts": True}
SIGNED_IN_AT = "oversight_signed_in_at"
LAST_ACTIVE_AT = "oversight_last_active_at"
# Activity is written to the session at most this often (seconds): a write per page
# view would cost every page a query for a clock that only needs minutes.
ACTIVITY_RESOLUTION = 60


class UserPreferencesMiddleware:
    """Show times in the signed-in person's time zone, and offer the keyboard shortcuts
    unless they turned them off (``request.preferences``). Their preferences are read
    once and kept in the session, so pages pay no query for them."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        request.preferences = DEFAULTS
        if request.user.is_authenticated:
            if SESSION_KEY not in request.session:
                stored = Preferences.objects.filter(user=request.user).values(*DEFAULTS)
                request.session[SESSION_KEY] = next(iter(stored), DEFAULTS)
            request.preferences = request.session[SESSION_KEY]
            timezone.activate(zoneinfo.ZoneInfo(request.preferences["time_zone"]))
        else:
            timezone.deactivate()
        return self.get_response(request)


def remember(request, preferences: Preferences) -> None:
    """Keep what the pages need of ``preferences`` in the session (after a change)."""
    request.session[SESSION_KEY] = {name: getattr(preferences, name) for name in DEFAULTS}


def on_sign_in(sender, request, user, **kwargs) -> None:
    """A sign-in starts the session's two clocks and forgives the failed attempts of
    this account from this address, and no others: django-axes' AXES_RESET_ON_SUCCESS
    would forgive every failure from the address, so an attacker signing in to their own
    account between guesses would reset the count on the account they are guessing; and
    forgiving the account's failures from everywhere would give whoever guesses it from
    elsewhere a fresh allowance each time its owner signs in."""
    now = time.time()
    request.session[SIGNED_IN_AT] = now
    request.session[LAST_ACTIVE_AT] = now
    reset_failed_sign_ins(username=user.get_username(), ip=get_client_ip_address(request))


def _duration(seconds: int) -> str:
    now = timezone.now()
    return timesince(now - timedelta(seconds=seconds), now)


def _expired(session) -> str | None:
    """Why this session has ended, or None while it lasts. A session without the clocks
    (signed in before they existed) has ended: it fails closed."""
    now = time.time()
    signed_in_at = session.get(SIGNED_IN_AT)
    last_active_at = session.get(LAST_ACTIVE_AT)
    if signed_in_at is None or now - signed_in_at > settings.OVERSIGHT_SESSION_MAX_SECONDS:
        limit = _duration(settings.OVERSIGHT_SESSION_MAX_SECONDS)
        return f"You were signed out: a session lasts at most {limit}. Please sign in again."
    if last_active_at is None or now - last_active_at > settings.OVERSIGHT_SESSION_IDLE_SECONDS:
        idle = _duration(settings.OVERSIGHT_SESSION_IDLE_SECONDS)
        return f"You were signed out after {idle} without activity. Please sign in again."
    return None


class SessionLifetimeMiddleware:
    """Sign a person out after OVERSIGHT_SESSION_IDLE_SECONDS without activity, and
    OVERSIGHT_SESSION_MAX_SECONDS after they signed in, whatever they did since.

    htmx GET requests are not activity: they are the pages' background polls (and
    fragment refreshes), and a page left open would otherwise keep its session alive
    for ever. An htmx request that finds its session ended is sent to the sign-in page
    as a whole page (HX-Redirect), not as a fragment swapped into the old one."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        if request.user.is_authenticated and (reason := _expired(request.session)):
            logout(request)
            messages.info(request, reason)
            if request.htmx:
                back_to = request.htmx.current_url_abs_path or "/"
                return HttpResponseClientRedirect(redirect_to_login(back_to).url)
        response = self.get_response(request)
        if request.user.is_authenticated and not (request.htmx and request.method == "GET"):
            now = time.time()
            if now - request.session.get(LAST_ACTIVE_AT, 0) >= ACTIVITY_RESOLUTION:
                request.session[LAST_ACTIVE_AT] = now
        return response


class NoStoreWhenSignedInMiddleware:
    """Every response to a signed-in person says ``Cache-Control: no-store``: it may hold
    what only they may see, and no cache (the browser's on a shared computer included)
    may keep it. Set here for every response so that a new view cannot forget it."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if request.user.is_authenticated:
            add_never_cache_headers(response)
        return response


NUL_REFUSED = "The address contains a NUL character (U+0000), which nothing here can hold."


class RefuseNulMiddleware:
    """A NUL character (U+0000) in the address or its query is refused with 400 before
    any view reads it: PostgreSQL cannot compare a text with one, and views that handed
    it to a query answered 500 (an artifact's address, the admin's list filters). Form
    fields refuse it themselves (Django's CharField); the API its queries' fields and
    its JSON bodies (422 naming the field, ``runs.api.limits``)."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        if request.path.startswith("/api/"):  # Its queries are checked field by field (422).
            if "\x00" in request.path:
                return problem(request, 400, "invalid", NUL_REFUSED)
        elif "\x00" in request.path or "\x00" in unquote(request.META.get("QUERY_STRING", "")):
            return HttpResponseBadRequest(NUL_REFUSED, content_type="text/plain; charset=utf-8")
        return self.get_response(request)
