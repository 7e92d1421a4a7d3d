"""Sign-in throttling, on top of django-axes, so that nobody can use it to lock
reviewers out.

- **A pause per account and address.** ``OVERSIGHT_LOGIN_FAILURE_LIMIT`` failures for
  one account from one address pause sign-in for that pair (axes'
  ``AXES_LOCKOUT_PARAMETERS``), even with the right password: the same person from
  another address, and everyone else from this one, are not paused.
- **Slowed, never locked, by address and by account.** Past a free allowance of
  failures from one address (guessing many accounts from it) or on one account (guessing
  it from many addresses), each further try from an address that has failed recently
  must wait, twice as long after each failure, at most ``MAX_WAIT``; the right password
  gets in once the wait is over. An address with no recent failures is never slowed: a
  person signing in from their own desk is not held back by someone guessing elsewhere.

Counts are axes' rows (``AccessAttempt``, one per account, address and browser), kept
in the database so that every process sees the same ones, and dropped a cool-off after
their last failure."""

import math
from datetime import timedelta

from axes.exceptions import AxesBackendPermissionDenied
from axes.helpers import get_client_ip_address, get_client_username, get_credentials
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm
from django.core.validators import MaxLengthValidator
from django.db.models import Max, Sum
from django.shortcuts import render
from django.utils import timezone

MAX_WAIT = timedelta(minutes=1)


def free_failures() -> dict[str, int]:
    """How many recent failures each key may have before tries are slowed: an office
    behind one address makes more typos than one person does."""
    limit = settings.AXES_FAILURE_LIMIT
    return {"ip_address": 3 * limit, "username": limit}


def wait_before_trying(username: str | None, address: str, now=None) -> timedelta:
    """How long a sign-in as ``username`` from ``address`` must wait at ``now`` (zero:
    it may go ahead). Each key's wait runs from its own last failure."""
    now = now or timezone.now()
    recent = AccessAttempt.objects.filter(attempt_time__gte=now - settings.AXES_COOLOFF_TIME)
    if not recent.filter(ip_address=address).exists():
        return timedelta(0)
    waits = [timedelta(0)]
    for key, free in free_failures().items():
        value = address if key == "ip_address" else username
        if value is None:
            continue
        counted = recent.filter(**{key: value}).aggregate(
            failures=Sum("failures_since_start"), last=Max("attempt_time")
        )
        beyond = (counted["failures"] or 0) - free
        if beyond > 0:
            wait = min(timedelta(seconds=2**beyond), MAX_WAIT)
            waits.append(counted["last"] + wait - now)
    return max(waits)


class SlowedSignIns:
    """An authentication backend, after axes' own and before the one that checks
    passwords: it refuses a try that must wait (see above) before any password is
    checked. The refusal is shown as axes shows a pause (``refused``), and is not
    counted as a failure: the try was never made."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None or password is None:  # not a password sign-in
            return None
        credentials = get_credentials(username=username, password=password, **kwargs)
        wait = wait_before_trying(
            get_client_username(request, credentials), get_client_ip_address(request)
        )
        if wait > timedelta(0):
            request.axes_locked_out = True  # Shown as a refusal, not counted (axes).
            request.sign_in_wait = math.ceil(wait.total_seconds())
            raise AxesBackendPermissionDenied("Sign-in slowed: wait before trying again.")
        return None


class LocalPasswords(ModelBackend):
    """Django's password check, for the accounts that may use a password (all of them
    unless passwords are turned off for single sign-on; then the break-glass admins). A
    session begun with a password ends when its account may no longer use one."""

    def user_can_authenticate(self, user) -> bool:
        return super().user_can_authenticate(user) and password_allowed(user)


def password_allowed(user) -> bool:
    """Whether ``user`` may sign in with a password: everyone while passwords are on,
    only the break-glass admins named in the settings once they are off."""
    return (
        settings.OVERSIGHT_PASSWORD_SIGN_IN
        or user.get_username() in settings.OVERSIGHT_BREAK_GLASS_USERS
    )


def not_a_password(request, credentials) -> bool:
    """Axes' allow-list (``AXES_WHITELIST_CALLABLE``): only tries with a password are
    counted and paused; a single sign-on callback carries none."""
    return "password" not in (credentials or {})


def refused(request, response=None, credentials=None):
    """The page of a refused sign-in (axes' ``AXES_LOCKOUT_CALLABLE``): paused for this
    account from this address, or slowed (how many seconds to wait, also in
    ``Retry-After``)."""
    wait = getattr(request, "sign_in_wait", None)
    context = {
        "wait_seconds": wait,
        "cooloff_minutes": int(settings.AXES_COOLOFF_TIME.total_seconds() // 60),
    }
    page = render(request, "registration/locked_out.html", context, status=429)
    page["Retry-After"] = str(wait or int(settings.AXES_COOLOFF_TIME.total_seconds()))
    return page


class SignInForm(AuthenticationForm):
    """The sign-in form, with the user name's length checked before anyone is asked to
    authenticate it: Django's sets the limit on the field but checks it nowhere, and a
    longer name reached the throttle's table (255 characters), a 500 on PostgreSQL."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        username = self.fields["username"]
        username.validators.append(MaxLengthValidator(username.max_length))


class SignIn(auth_views.LoginView):
    """The sign-in page: a password form, a single sign-on button, or both. Once
    passwords are off the form stays, folded, for the break-glass admins."""

    form_class = SignInForm

    def get_context_data(self, **kwargs) -> dict:
        return {
            **super().get_context_data(**kwargs),
            "single_sign_on": settings.OVERSIGHT_OIDC_ISSUER and settings.OVERSIGHT_OIDC_NAME,
            "passwords_on": settings.OVERSIGHT_PASSWORD_SIGN_IN,
        }
