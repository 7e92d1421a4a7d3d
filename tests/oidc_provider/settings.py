"""Settings of the suite's own OpenID Connect provider, read from the environment that
tests/identity_provider.py gives it (serve.py adds the issuer once it knows its port).
Nothing here comes from Oversight's settings, database or var dir."""

import os
import secrets
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.core.exceptions import ImproperlyConfigured


def _required(name: str) -> str:
    if not (value := os.environ.get(name, "")):
        raise ImproperlyConfigured(f"{name} must be set (tests/identity_provider.py sets it)")
    return value


def _new_signing_key() -> str:
    """A new RSA key at every start, in PEM: ID tokens are signed RS256 with it and its
    public half is served at the JWKS URI, where a relying party fetches it."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


DIRECTORY = Path(_required("OIDC_PROVIDER_DIR"))
OIDC_PROVIDER_SETUP_KEY = _required("OIDC_PROVIDER_SETUP_KEY")
OIDC_PROVIDER_CLIENT_ID = _required("OIDC_PROVIDER_CLIENT_ID")
OIDC_PROVIDER_CLIENT_SECRET = _required("OIDC_PROVIDER_CLIENT_SECRET")

SECRET_KEY = secrets.token_urlsafe(50)
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1"]
ROOT_URLCONF = "tests.oidc_provider.urls"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oauth2_provider",
    "tests.oidc_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True}]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": DIRECTORY / "provider.sqlite3",
        # Requests run on threads: a writer waits for another instead of failing.
        "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
    }
}
# Cookies are kept per host, not per port: in the browser tests Oversight's live server is
# on 127.0.0.1 too, and the two sites' sessions must not overwrite each other.
SESSION_COOKIE_NAME = "provider_sessionid"
CSRF_COOKIE_NAME = "provider_csrftoken"
# Test people only: a sign-in should not cost a key derivation's third of a second.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# An error is written to stderr (the fixture's log file), not mailed to nobody.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"django": {"handlers": ["stderr"], "level": "ERROR"}},
}

OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    # Given, not derived from each request, so that ``iss`` is exactly this string.
    "OIDC_ISS_ENDPOINT": _required("OIDC_PROVIDER_ISSUER"),
    "OIDC_RSA_PRIVATE_KEY": _new_signing_key(),
    "OIDC_RESPONSE_TYPES_SUPPORTED": ["code"],
    "OIDC_RP_INITIATED_LOGOUT_ENABLED": True,
    # A logout carrying the signed-in person's own ID token ends their session at once,
    # with no page asking them to confirm (the spec's SHOULD, not its MUST).
    "OIDC_RP_INITIATED_LOGOUT_ALWAYS_PROMPT": False,
    # Their descriptions would be shown on a consent page, which the client skips.
    "SCOPES": {scope: scope for scope in ("openid", "email", "profile", "groups")},
    "DEFAULT_SCOPES": ["openid"],
    "OAUTH2_VALIDATOR_CLASS": "tests.oidc_provider.claims.Claims",
    # PKCE is accepted, with S256 only, and not required of a relying party.
    "PKCE_REQUIRED": False,
    "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,
}
