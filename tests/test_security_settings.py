"""What a deployment enforces: HTTPS (redirect, HSTS, secure cookies, the proxy's header),
no cache of signed-in pages, sessions that end when idle and after a maximum, SMTP read
from the environment, and ``check --deploy`` clean with the documented production
environment (deploy/production.env.example)."""

import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from runs.middleware import LAST_ACTIVE_AT, SIGNED_IN_AT
from tests.helpers import project_settings

ROOT = Path(__file__).resolve().parent.parent
PRODUCTION_ENV = ROOT / "deploy" / "production.env.example"
SMTP = "django.core.mail.backends.smtp.EmailBackend"
HTMX = {"HX-Request": "true", "HX-Current-URL": "http://testserver/approvals/"}
SECURITY_VARIABLES = [
    "OVERSIGHT_DEBUG",
    "OVERSIGHT_SSL_REDIRECT",
    "OVERSIGHT_HSTS_SECONDS",
    "OVERSIGHT_HSTS_INCLUDE_SUBDOMAINS",
    "OVERSIGHT_HSTS_PRELOAD",
    "OVERSIGHT_PROXY_SSL_HEADER",
    "OVERSIGHT_CLIENT_IP_HEADER",
    "OVERSIGHT_SECURE_COOKIES",
    "OVERSIGHT_SESSION_IDLE_SECONDS",
    "OVERSIGHT_SESSION_MAX_SECONDS",
    "OVERSIGHT_FROM_EMAIL",
]


@pytest.fixture
def configured(monkeypatch):
    """oversight/settings.py as a deployment with ``environ`` (and nothing else of these
    variables) gets it; debug off unless given."""
    for name in SECURITY_VARIABLES:
        monkeypatch.delenv(name, raising=False)

    def _configured(**environ: str) -> dict:
        return project_settings(monkeypatch, **{"OVERSIGHT_DEBUG": "false", **environ})

    return _configured


# --- settings read from the environment ------------------------------------------------


def test_production_enforces_https_for_a_year_and_short_sessions(configured):
    s = configured()

    assert s["SECURE_SSL_REDIRECT"] is True
    assert (s["SECURE_HSTS_SECONDS"], s["SECURE_HSTS_INCLUDE_SUBDOMAINS"]) == (31536000, True)
    assert s["SESSION_COOKIE_SECURE"] is s["CSRF_COOKIE_SECURE"] is True
    assert s["SECURE_PROXY_SSL_HEADER"] is None
    assert (s["OVERSIGHT_SESSION_IDLE_SECONDS"], s["OVERSIGHT_SESSION_MAX_SECONDS"]) == (
        1800,
        43200,
    )
    assert s["SESSION_COOKIE_AGE"] == 43200
    assert s["MAILERS"]["default"]["BACKEND"] == SMTP


def test_debug_neither_redirects_nor_pins_https_and_prints_emails(configured):
    s = configured(OVERSIGHT_DEBUG="true")

    assert (s["SECURE_SSL_REDIRECT"], s["SECURE_HSTS_SECONDS"]) == (False, 0)
    assert s["MAILERS"]["default"]["BACKEND"] == "django.core.mail.backends.console.EmailBackend"


def test_https_proxy_and_session_lifetimes_come_from_the_environment(configured):
    s = configured(
        OVERSIGHT_SSL_REDIRECT="false",
        OVERSIGHT_HSTS_SECONDS="600",
        OVERSIGHT_HSTS_INCLUDE_SUBDOMAINS="false",
        OVERSIGHT_HSTS_PRELOAD="true",
        OVERSIGHT_PROXY_SSL_HEADER="X-Forwarded-Proto=https",
        OVERSIGHT_CLIENT_IP_HEADER="X-Real-IP",
        OVERSIGHT_SESSION_IDLE_SECONDS="900",
        OVERSIGHT_SESSION_MAX_SECONDS="3600",
    )

    assert s["SECURE_SSL_REDIRECT"] is False
    assert (s["SECURE_HSTS_SECONDS"], s["SECURE_HSTS_INCLUDE_SUBDOMAINS"]) == (600, False)
    assert s["SECURE_HSTS_PRELOAD"] is True
    assert s["SECURE_PROXY_SSL_HEADER"] == ("HTTP_X_FORWARDED_PROTO", "https")
    assert s["OVERSIGHT_CLIENT_IP_HEADER"] == "HTTP_X_REAL_IP"
    assert (s["OVERSIGHT_SESSION_IDLE_SECONDS"], s["SESSION_COOKIE_AGE"]) == (900, 3600)


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("OVERSIGHT_PROXY_SSL_HEADER", "X-Forwarded-Proto"),
        ("OVERSIGHT_PROXY_SSL_HEADER", "=https"),
        ("OVERSIGHT_PROXY_SSL_HEADER", "X-Forwarded Proto=https"),
        ("OVERSIGHT_CLIENT_IP_HEADER", "X-Forwarded-For: 1.2.3.4"),
        ("OVERSIGHT_SESSION_IDLE_SECONDS", "0"),
        ("OVERSIGHT_HSTS_SECONDS", "a year"),
    ],
)
def test_a_malformed_value_stops_start_up_naming_the_variable(configured, name, raw):
    with pytest.raises(ImproperlyConfigured, match=name):
        configured(**{name: raw})


def test_a_session_cannot_last_less_than_it_may_idle(configured):
    with pytest.raises(ImproperlyConfigured, match="OVERSIGHT_SESSION_MAX_SECONDS"):
        configured(OVERSIGHT_SESSION_IDLE_SECONDS="3600", OVERSIGHT_SESSION_MAX_SECONDS="600")


def test_smtp_server_login_tls_and_sender_come_from_the_environment(configured):
    s = configured(
        OVERSIGHT_EMAIL_HOST="smtp.example.com",
        OVERSIGHT_EMAIL_USE_TLS="true",
        OVERSIGHT_EMAIL_USER="oversight@example.com",
        OVERSIGHT_EMAIL_PASSWORD="s3cret",
        OVERSIGHT_FROM_EMAIL="alerts@example.com",
    )

    assert s["MAILERS"]["default"] == {
        "BACKEND": SMTP,
        "OPTIONS": {
            "host": "smtp.example.com",
            "port": 587,
            "timeout": 10,
            "use_tls": True,
            "use_ssl": False,
            "username": "oversight@example.com",
            "password": "s3cret",
        },
    }
    assert s["DEFAULT_FROM_EMAIL"] == "alerts@example.com"


def test_implicit_tls_defaults_to_port_465(configured):
    options = configured(OVERSIGHT_EMAIL_USE_SSL="true")["MAILERS"]["default"]["OPTIONS"]
    assert (options["port"], options["use_ssl"], options["use_tls"]) == (465, True, False)


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"OVERSIGHT_EMAIL_USE_TLS": "true", "OVERSIGHT_EMAIL_USE_SSL": "true"}, "USE_SSL"),
        ({"OVERSIGHT_EMAIL_USER": "oversight"}, "OVERSIGHT_EMAIL_PASSWORD"),
    ],
)
def test_contradictory_or_incomplete_smtp_settings_stop_start_up(configured, environ, named):
    with pytest.raises(ImproperlyConfigured, match=named):
        configured(**environ)


def test_check_deploy_is_clean_with_the_documented_production_environment():
    environ = {}
    for line in PRODUCTION_ENV.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, value = line.partition("=")
            environ[name] = value
    environ["OVERSIGHT_SECRET_KEY"] = secrets.token_urlsafe(50)  # Left empty in the file.

    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", **environ},
        capture_output=True,
        text=True,
        timeout=120,
    )

    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "WARNINGS" not in output and "ERRORS" not in output, output
    assert "no issues" in output


# --- behaviour --------------------------------------------------------------------------


def test_plain_http_is_redirected_except_the_health_check(client, settings, db):
    settings.SECURE_SSL_REDIRECT = True  # As in production (tests/settings.py turns it off).

    response = client.get("/approvals/")
    assert (response.status_code, response["Location"]) == (301, "https://testserver/approvals/")

    health = client.get("/healthz")
    assert health.status_code in (200, 503)  # answered over plain HTTP, not redirected


def test_no_cache_may_keep_a_signed_in_page(client, reviewer):
    client.force_login(reviewer)

    for response in [
        client.get("/"),
        client.get("/approvals/"),
        client.get("/approvals/", headers=HTMX),
        client.get("/no-such-page/"),
    ]:
        assert "no-store" in response["Cache-Control"], response


def age_session(client, **seconds_ago: float) -> None:
    """Move the session's clocks back, as if that much time had passed."""
    session = client.session
    for key, ago in seconds_ago.items():
        session[{"signed_in": SIGNED_IN_AT, "active": LAST_ACTIVE_AT}[key]] = time.time() - ago
    session.save()


def test_an_idle_session_is_signed_out_with_a_reason(client, reviewer):
    client.force_login(reviewer)
    age_session(client, active=31 * 60)

    response = client.get("/approvals/", follow=True)

    assert response.redirect_chain == [("/accounts/login/?next=/approvals/", 302)]
    assert "You were signed out after 30\xa0minutes without activity. Please sign in again." in [
        str(m) for m in response.context["messages"]
    ]
    assert client.get("/").status_code == 302


def test_a_page_view_is_activity_a_background_poll_is_not(client, reviewer):
    client.force_login(reviewer)
    age_session(client, active=29 * 60)
    before = client.session[LAST_ACTIVE_AT]

    assert client.get("/approvals/", headers=HTMX).status_code == 200
    assert client.session[LAST_ACTIVE_AT] == before
    assert client.get("/").status_code == 200
    assert time.time() - client.session[LAST_ACTIVE_AT] < 60


def test_a_poll_after_the_idle_limit_sends_the_whole_page_to_sign_in(client, reviewer):
    client.force_login(reviewer)
    age_session(client, active=31 * 60)

    response = client.get("/approvals/", headers=HTMX)

    assert response["HX-Redirect"] == "/accounts/login/?next=/approvals/"
    assert client.get("/").status_code == 302


def test_a_session_ends_at_its_maximum_age_however_active(client, reviewer):
    client.force_login(reviewer)
    age_session(client, signed_in=12 * 3600 + 1, active=0)

    response = client.get("/", follow=True)

    assert response.redirect_chain == [("/accounts/login/?next=/", 302)]
    messages = [str(m) for m in response.context["messages"]]
    assert "You were signed out: a session lasts at most 12\xa0hours. Please sign in again." in (
        messages
    )
