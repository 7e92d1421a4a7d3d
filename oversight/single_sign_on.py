"""Single sign-on with OpenID Connect: mozilla-django-oidc's code flow (with PKCE and a
nonce), configured from the issuer's discovery document, read once per process.

On top of the library:
- **The ID token is checked for its issuer and audience**, as the specification asks
  (the library checks the signature, expiry and nonce only), and the userinfo answer must
  be about the same ``sub``.
- **Accounts are found by issuer and ``sub``** (``ProviderIdentity``), never by a name or
  an address that can change hands. A first sign-in links an existing account only when
  the provider vouches for the email address (``email_verified``) and exactly one
  account, not a superuser nor a break-glass one, has it; otherwise it makes a new one,
  without a usable password.
- **Roles follow the provider's groups** (``OVERSIGHT_OIDC_ROLES``): each sign-in grants
  the memberships its groups map to and takes back those it granted before that they no
  longer map to; without a sign-in they lapse (``runs/services/memberships.py``).
  Memberships an admin gave by hand are left alone.
- **Nothing here touches the network until someone chooses single sign-on**: the backend
  is built for every password sign-in too, and the break-glass admin must get in while
  the provider is down.
"""

import functools
import logging
import re
from urllib.parse import urlencode

import jwt
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth import views as auth_views
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import SuspiciousOperation
from django.db import IntegrityError, transaction
from django.db.models.functions import Now
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
)

from runs.models import ProviderIdentity
from runs.services.memberships import grant_roles

log = logging.getLogger("oversight.sign_in")

DISCOVERY_PATH = "/.well-known/openid-configuration"
CLOCK_LEEWAY_SECONDS = 60
ENDPOINTS = ("authorization_endpoint", "token_endpoint", "userinfo_endpoint", "jwks_uri")


class ProviderUnreachable(Exception):
    """The provider could not be asked, or answered with something that is not OpenID
    Connect; the message says which, in words for the person signing in."""


def enabled() -> bool:
    return bool(settings.OVERSIGHT_OIDC_ISSUER)


def provider() -> dict:
    """The configured issuer's discovery document."""
    return _discovery(settings.OVERSIGHT_OIDC_ISSUER)


@functools.cache
def _discovery(issuer: str) -> dict:
    """Read once per process and issuer (a failure is not remembered: the next sign-in
    asks again). The document must name the issuer exactly as configured, or tokens from
    it would be checked against the wrong one."""
    url = issuer.rstrip("/") + DISCOVERY_PATH
    try:
        answer = requests.get(url, timeout=settings.OIDC_TIMEOUT)
        answer.raise_for_status()
        document = answer.json()
    except (requests.RequestException, ValueError) as error:
        log.warning("single sign-on: cannot read %s: %s", url, error)
        raise ProviderUnreachable(
            "The sign-in provider did not answer. Try again in a moment."
        ) from error
    if not isinstance(document, dict) or document.get("issuer") != issuer:
        found = document.get("issuer") if isinstance(document, dict) else None
        log.error("single sign-on: %s names the issuer %r, not %r", DISCOVERY_PATH, found, issuer)
        raise ProviderUnreachable("The sign-in provider is not set up as Oversight expects.")
    if missing := [name for name in ENDPOINTS if not document.get(name)]:
        log.error("single sign-on: the discovery document lacks %s", ", ".join(missing))
        raise ProviderUnreachable("The sign-in provider is not set up as Oversight expects.")
    return document


def _endpoint(name: str) -> property:
    return property(lambda self: provider()[name])


class ProviderSignIn(OIDCAuthenticationBackend):
    """The authentication backend of single sign-on (see the module's docstring)."""

    OIDC_OP_AUTHORIZATION_ENDPOINT = _endpoint("authorization_endpoint")
    OIDC_OP_TOKEN_ENDPOINT = _endpoint("token_endpoint")
    OIDC_OP_USER_ENDPOINT = _endpoint("userinfo_endpoint")
    OIDC_OP_JWKS_ENDPOINT = _endpoint("jwks_uri")
    OIDC_RP_IDP_SIGN_KEY = None

    def __init__(self) -> None:
        # The library's reads every endpoint here; they are properties (no network).
        self.UserModel = get_user_model()
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO

    def authenticate(self, request, **credentials):
        # Only the callback passes a nonce: a password sign-in is none of this backend's.
        if request is None or not enabled() or "nonce" not in credentials:
            return None
        return super().authenticate(request, **credentials)

    def get_user(self, user_id):
        # Django's (active accounts only), not the library's; and a session begun through
        # the provider ends once single sign-on is turned off.
        return ModelBackend.get_user(self, user_id) if enabled() else None

    def get_token(self, payload):
        token = super().get_token(payload)
        if not (isinstance(token, dict) and isinstance(token.get("id_token"), str)):
            raise SuspiciousOperation("the token endpoint answered without an ID token")
        return token

    def retrieve_matching_jwk(self, token):
        try:
            return super().retrieve_matching_jwk(token)
        except (KeyError, TypeError, AttributeError, jwt.PyJWTError) as error:
            raise SuspiciousOperation(f"no usable key for the ID token: {error!r}") from error

    def _verify_jws(self, payload, key):
        """The library's check, with the issuer and audience checked too, and a minute
        of leeway for the provider's clock."""
        try:
            algorithm = jwt.get_unverified_header(payload).get("alg")
            if algorithm != self.OIDC_RP_SIGN_ALGO:
                raise SuspiciousOperation(f"ID token signed with {algorithm!r}")
            return jwt.decode(
                payload,
                key,
                algorithms=[algorithm],
                audience=self.OIDC_RP_CLIENT_ID,
                issuer=settings.OVERSIGHT_OIDC_ISSUER,
                leeway=CLOCK_LEEWAY_SECONDS,
                options={"require": ["exp", "iat", "sub"]},
            )
        except jwt.PyJWTError as error:
            raise SuspiciousOperation(f"ID token refused: {error}") from error

    def get_userinfo(self, access_token, id_token, payload):
        userinfo = super().get_userinfo(access_token, id_token, payload)
        if not isinstance(userinfo, dict) or userinfo.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("userinfo is about another subject than the ID token")
        return {**payload, **userinfo}

    def verify_claims(self, claims) -> bool:
        # A subject Oversight can keep (ProviderIdentity.subject); text claims are read
        # through ``text`` below, whatever type the provider sent.
        sub = claims.get("sub")
        return isinstance(sub, str) and 0 < len(sub) <= 255

    def filter_users_by_claims(self, claims):
        return self.UserModel.objects.filter(
            provider_identities__issuer=settings.OVERSIGHT_OIDC_ISSUER,
            provider_identities__subject=claims["sub"],
        )

    def create_user(self, claims):
        for _ in range(3):
            try:
                with transaction.atomic():
                    user = _account_to_link(claims) or _new_account(claims)
                    ProviderIdentity.objects.create(
                        user=user, issuer=settings.OVERSIGHT_OIDC_ISSUER, subject=claims["sub"]
                    )
                break
            except IntegrityError:
                # This person's first sign-in in another tab won (then use its account),
                # or someone else's took the user name a moment ago (then try again).
                if user := self.filter_users_by_claims(claims).first():
                    break
        else:
            raise SuspiciousOperation("no free user name after three tries")
        log.info("single sign-on: %s is %s at the provider", user, claims["sub"])
        return self.update_user(user, claims)

    def update_user(self, user, claims):
        if not user.is_active:
            self.request.sign_in_refusal = "Your Oversight account is deactivated. Ask an admin."
            return user
        with transaction.atomic():
            _copy_profile(user, claims)
            ProviderIdentity.objects.filter(
                user=user, issuer=settings.OVERSIGHT_OIDC_ISSUER, subject=claims["sub"]
            ).update(last_sign_in_at=Now())
            grant_roles(user, groups_in(claims))
        return user


def groups_in(claims: dict) -> set[str]:
    """The groups claim, as a list of names (or one name)."""
    value = claims.get(settings.OVERSIGHT_OIDC_GROUPS_CLAIM) or []
    if isinstance(value, str):
        return {value}
    if not isinstance(value, list):
        return set()
    return {group for group in value if isinstance(group, str)}


def text(claims: dict, name: str, longest: int) -> str:
    """A text claim as text, cut to what Oversight keeps; empty if absent or not text."""
    value = claims.get(name)
    return value[:longest] if isinstance(value, str) else ""


def _account_to_link(claims: dict):
    """The one existing account the provider vouches for by email, if any."""
    email = text(claims, "email", 254)
    # ASCII only, and equal once lowercased: PostgreSQL's case-insensitive match would
    # also take an address spelt with a dotless i (U+0131) for one with an i.
    if not email.isascii() or "@" not in email or claims.get("email_verified") is not True:
        return None
    candidates = list(
        get_user_model()
        .objects.filter(email__iexact=email, is_active=True, is_superuser=False)
        .exclude(username__in=settings.OVERSIGHT_BREAK_GLASS_USERS)
        .exclude(provider_identities__issuer=settings.OVERSIGHT_OIDC_ISSUER)[:2]
    )
    candidates = [user for user in candidates if user.email.lower() == email.lower()]
    return candidates[0] if len(candidates) == 1 else None


def _new_account(claims: dict):
    wished = text(claims, "preferred_username", 140) or text(claims, "email", 254).partition("@")[0]
    base = re.sub(r"[^\w.@+-]", "-", wished)[:140] or "user"
    users = get_user_model().objects
    reserved = {name.lower() for name in settings.OVERSIGHT_BREAK_GLASS_USERS}
    username, n = base, 1
    while username.lower() in reserved or users.filter(username__iexact=username).exists():
        n += 1
        username = f"{base}-{n}"
    return users.create_user(username)  # no usable password


def _copy_profile(user, claims: dict) -> None:
    """The provider's name and email address, kept up to date at each sign-in."""
    fields = {
        "email": text(claims, "email", 254) or user.email,
        "first_name": text(claims, "given_name", 150) or user.first_name,
        "last_name": text(claims, "family_name", 150) or user.last_name,
    }
    if any(getattr(user, field) != value for field, value in fields.items()):
        for field, value in fields.items():
            setattr(user, field, value)
        user.save(update_fields=list(fields))


def failed(request: HttpRequest, reason: str, status: int) -> HttpResponse:
    return render(request, "registration/sign_in_failed.html", {"reason": reason}, status=status)


class Start(OIDCAuthenticationRequestView):
    """Sends the browser to the provider, with a fresh state, nonce and PKCE challenge."""

    OIDC_OP_AUTH_ENDPOINT = _endpoint("authorization_endpoint")

    def __init__(self, **kwargs) -> None:
        super(OIDCAuthenticationRequestView, self).__init__(**kwargs)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID

    def get(self, request):
        if not enabled():
            raise Http404("Single sign-on is off.")
        try:
            return super().get(request)
        except ProviderUnreachable as error:
            return failed(request, str(error), 502)


class Callback(OIDCAuthenticationCallbackView):
    """Where the provider sends the browser back; every way it can go wrong is a page
    that says what happened, never a server error."""

    def get(self, request):
        if not enabled():
            raise Http404("Single sign-on is off.")
        # First of all, a sign-in this browser started: a link forged elsewhere, with an
        # error or a code, signs no one out or in and shows none of its text.
        if request.GET.get("state") not in request.session.get("oidc_states", {}):
            return failed(
                request,
                "This sign-in expired or was started in another browser. Start again.",
                400,
            )
        if error := request.GET.get("error"):
            super().get(request)  # forgets the state, signs out
            said = request.GET.get("error_description") or error
            return failed(request, f"The sign-in provider said: {said[:300]}", 403)
        try:
            return super().get(request)
        except ProviderUnreachable as error:
            return failed(request, str(error), 502)
        except requests.HTTPError as error:
            log.warning("single sign-on: the provider refused: %s", error)
            return failed(request, "The sign-in provider refused this sign-in. Start again.", 403)
        except requests.RequestException as error:
            log.warning("single sign-on: the provider did not answer: %s", error)
            return failed(request, "The sign-in provider did not answer. Try again.", 502)
        except SuspiciousOperation as error:
            log.warning("single sign-on: %s", error)
            return failed(request, "The sign-in provider's answer could not be verified.", 403)

    def login_failure(self):
        reason = getattr(self.request, "sign_in_refusal", None)
        return failed(self.request, reason or "The sign-in provider did not let you in.", 403)


class SignOut(auth_views.LogoutView):
    """Django's sign-out; after single sign-on, on to the provider's, so that the next
    person at this browser is asked who they are instead of being let straight back in.

    The way on is a page that goes there by itself, not a redirect: the pages' security
    policy lets forms send to Oversight only (``form-action 'self'``), which a browser
    applies to the sign-out form's redirects too."""

    def post(self, request, *args, **kwargs):
        id_token = request.session.get("oidc_id_token")
        response = super().post(request, *args, **kwargs)
        if id_token and enabled() and (provider_url := end_session_url(request, id_token)):
            context = {"provider_url": provider_url, "provider": settings.OVERSIGHT_OIDC_NAME}
            return render(request, "registration/signing_out.html", context)
        return response


def end_session_url(request: HttpRequest, id_token: str) -> str | None:
    """Where to send a person signing out, so that the provider forgets them too; None
    if it has no such endpoint or cannot be asked now."""
    try:
        endpoint = provider().get("end_session_endpoint")
    except ProviderUnreachable:
        return None
    if not endpoint:
        return None
    back = request.build_absolute_uri(reverse("login"))
    query = urlencode({"id_token_hint": id_token, "post_logout_redirect_uri": back})
    return f"{endpoint}{'&' if '?' in endpoint else '?'}{query}"
