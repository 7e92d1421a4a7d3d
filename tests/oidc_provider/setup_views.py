"""Endpoints for the suite alone (tests/identity_provider.py): the relying party's redirect
URIs, known only once Oversight's live server has its port, and the people who sign in,
whose groups a test changes between two sign-ins. JSON in and out, only from loopback and
with the key the fixture made (so that no browser page can call them)."""

import json
import secrets
from collections.abc import Callable
from functools import wraps

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from oauth2_provider.models import get_application_model

from tests.oidc_provider.models import Profile

LOOPBACK = {"127.0.0.1", "::1"}


def for_the_suite(change: Callable[[dict], dict]) -> Callable[[HttpRequest], JsonResponse]:
    """A view doing ``change`` with the request's JSON object: 403 from elsewhere than
    loopback or without the key, 400 for a body that is not what ``change`` reads."""

    @csrf_exempt
    @require_POST
    @wraps(change)
    def view(request: HttpRequest) -> JsonResponse:
        key = request.headers.get("X-Provider-Key", "").encode()
        expected = settings.OIDC_PROVIDER_SETUP_KEY.encode()
        if request.META["REMOTE_ADDR"] not in LOOPBACK or not secrets.compare_digest(key, expected):
            return JsonResponse({"error": "forbidden"}, status=403)
        try:
            body = json.loads(request.body)
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
            return JsonResponse(change(body))
        except ValueError as error:
            return JsonResponse({"error": f"bad request: {error}"}, status=400)

    return view


def _read[T](body: dict, name: str, kind: type[T], default: T | None = None) -> T:
    """``body[name]`` (``default`` if absent), which must be a ``kind``."""
    value = body.get(name, default)
    if not isinstance(value, kind):
        raise ValueError(f"{name} must be a {kind.__name__}")
    return value


def _names(body: dict, name: str) -> list[str]:
    names = _read(body, name, list)
    if not all(isinstance(item, str) for item in names):
        raise ValueError(f"{name} must be a list of strings")
    return names


@for_the_suite
def setup_client(body: dict) -> dict:
    """Replaces the one client's redirect and post-logout redirect URIs."""
    get_application_model().objects.filter(client_id=settings.OIDC_PROVIDER_CLIENT_ID).update(
        redirect_uris=" ".join(_names(body, "redirect_uris")),
        post_logout_redirect_uris=" ".join(_names(body, "post_logout_redirect_uris")),
    )
    return {}


@for_the_suite
@transaction.atomic
def setup_user(body: dict) -> dict:
    """Creates or updates a person, their groups replaced: one taken out of a group has
    lost it at their next sign-in. Answers their ``sub``."""
    person, _ = User.objects.get_or_create(username=_read(body, "username", str))
    person.email = _read(body, "email", str)
    person.set_password(_read(body, "password", str))
    person.save()
    Profile.objects.update_or_create(
        user=person,
        defaults={
            "name": _read(body, "name", str, ""),
            "email_verified": _read(body, "email_verified", bool, True),
        },
    )
    groups = [Group.objects.get_or_create(name=name)[0] for name in _names(body, "groups")]
    person.groups.set(groups)
    return {"sub": str(person.pk)}
