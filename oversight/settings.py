"""Settings for Oversight, read from the environment; every variable read here is listed
in docs/operating/settings.md (a test checks it)."""

import os
from datetime import timedelta
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

from oversight.env import (
    artifact_storage,
    bound_postgres_sessions,
    database_from_url,
    env_bool,
    env_int,
    env_issuer,
    env_list,
    env_role_rules,
    env_str,
    local_secret,
    sqlite_database,
)
from oversight.proxy import env_client_ip_header, env_ssl_header

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("OVERSIGHT_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("OVERSIGHT_DEBUG", default=False)
# Unset: a local installation's own key, made once in VAR_DIR. Machines sharing a
# PostgreSQL database must share one key, so production sets it; empty is a mistake.
_key = os.environ.get("OVERSIGHT_SECRET_KEY")
if _key == "":
    raise ImproperlyConfigured("OVERSIGHT_SECRET_KEY is empty: set a key, or unset the variable")
if _key is None and os.environ.get("DATABASE_URL") and not DEBUG:
    raise ImproperlyConfigured(
        "OVERSIGHT_SECRET_KEY must be set with DATABASE_URL: every machine sharing the "
        "database needs the same key"
    )
SECRET_KEY = _key or local_secret(VAR_DIR)
if len(SECRET_KEY) < 32:
    raise ImproperlyConfigured("OVERSIGHT_SECRET_KEY must be at least 32 characters")
ALLOWED_HOSTS = env_list("OVERSIGHT_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("OVERSIGHT_CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    "ninja",
    "axes",
    "runs",
    "graphs",
]

MIDDLEWARE = [
    # First: every later line of the request names it, and its access line is written.
    "oversight.request_ids.RequestIdMiddleware",
    "oversight.probes.ProbesAnyHostMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "runs.middleware.RefuseNulMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "runs.middleware.NoStoreWhenSignedInMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "runs.middleware.SessionLifetimeMiddleware",
    "runs.middleware.UserPreferencesMiddleware",
    "runs.api.replay.IdempotencyKeyMiddleware",
    # Last, as django-axes requires: it turns a refused sign-in into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "oversight.urls"
WSGI_APPLICATION = "oversight.wsgi.application"
ASGI_APPLICATION = "oversight.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "runs.context_processors.navigation",
                "runs.context_processors.version",
            ],
        },
    },
]

_database_url = env_str("DATABASE_URL", "")
DATABASES = {
    "default": (
        database_from_url(_database_url)
        if _database_url
        else sqlite_database(
            VAR_DIR / "oversight.sqlite3",
            synchronous=env_str("OVERSIGHT_SQLITE_SYNCHRONOUS", "FULL").upper(),
        )
    )
}
# On PostgreSQL, how long a process stopped inside a transaction (SIGSTOP, a paused VM,
# a debugger) can hold others up: its session ends after this idle time, rolling the
# transaction back (a worker's claim is then taken over through verification). A lock is
# waited for at most the lock wait, longer than the idle time, so that a cancel behind a
# stopped worker outlasts it; a statement runs at most the statement time. 0: no bound.
OVERSIGHT_DB_IDLE_IN_TRANSACTION_SECONDS = env_int(
    "OVERSIGHT_DB_IDLE_IN_TRANSACTION_SECONDS", 10, minimum=0
)
OVERSIGHT_DB_LOCK_WAIT_SECONDS = env_int("OVERSIGHT_DB_LOCK_WAIT_SECONDS", 15, minimum=0)
OVERSIGHT_DB_STATEMENT_SECONDS = env_int("OVERSIGHT_DB_STATEMENT_SECONDS", 120, minimum=0)
# A read replica of the primary (streaming or logical replication): the auditors' search,
# exports, evidence bundles and the numbers page read the audit record from it
# (runs.replica); everything that decides or writes stays on the primary.
_replica_url = env_str("DATABASE_REPLICA_URL", "")
if _replica_url:
    if not _database_url:
        raise ImproperlyConfigured(
            "DATABASE_REPLICA_URL needs DATABASE_URL: a replica copies a PostgreSQL primary"
        )
    DATABASES["replica"] = database_from_url(_replica_url, "DATABASE_REPLICA_URL")
DATABASE_ROUTERS = ["runs.replica.ReplicaRouter"]
if _database_url:
    for _database in DATABASES.values():
        bound_postgres_sessions(
            _database,
            idle=OVERSIGHT_DB_IDLE_IN_TRANSACTION_SECONDS,
            lock_wait=OVERSIGHT_DB_LOCK_WAIT_SECONDS,
            statement=OVERSIGHT_DB_STATEMENT_SECONDS,
        )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

# Sign-in throttling (django-axes and oversight.sign_in): failed sign-ins pause one
# account from one address (the pair) at the limit, until the cool-off has passed since
# the last counted failure, even with the right password; past an allowance, tries from
# an address that has failed recently are slowed (by address and by account), never
# locked. A success forgives that pair's own failures (runs.middleware). The backends
# come first: they refuse before any password is checked.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "oversight.sign_in.SlowedSignIns",
    "oversight.sign_in.LocalPasswords",
    "oversight.single_sign_on.ProviderSignIn",
]
AXES_FAILURE_LIMIT = env_int("OVERSIGHT_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("OVERSIGHT_LOGIN_COOLOFF_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = False
# Refused attempts during a lockout do not extend it: it ends a known time after it began.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_LOCKOUT_CALLABLE = "oversight.sign_in.refused"
# Single sign-on is none of the throttle's business: the provider has its own.
AXES_WHITELIST_CALLABLE = "oversight.sign_in.not_a_password"
AXES_CLIENT_IP_CALLABLE = "oversight.proxy.client_ip"
# Behind a proxy: the header it sets to the client's address (X-Forwarded-For, X-Real-IP).
OVERSIGHT_CLIENT_IP_HEADER = env_client_ip_header("OVERSIGHT_CLIENT_IP_HEADER")
# Successful sign-ins are not logged by axes (nothing would ever prune that table);
# failures are kept until their cool-off has passed. Admins see the failures and lift
# pauses in the admin site (Axes, Access attempts: delete the row) or with
# manage.py axes_list_attempts, axes_reset_username and axes_reset_ip.
AXES_DISABLE_ACCESS_LOG = True
AXES_ENABLE_ADMIN = True
AXES_VERBOSE = False

# Single sign-on with OpenID Connect (oversight/single_sign_on.py), on once an issuer is
# set: its discovery document gives the endpoints. The provider's groups claim grants
# project roles by rules GROUP=PROJECT:ROLE. Once passwords are off, only the break-glass
# admins named here sign in with one (for when the provider is down).
OVERSIGHT_OIDC_ISSUER = env_issuer("OVERSIGHT_OIDC_ISSUER")
OIDC_RP_CLIENT_ID = env_str("OVERSIGHT_OIDC_CLIENT_ID", "" if not OVERSIGHT_OIDC_ISSUER else None)
OIDC_RP_CLIENT_SECRET = env_str(
    "OVERSIGHT_OIDC_CLIENT_SECRET", "" if not OVERSIGHT_OIDC_ISSUER else None
)
OIDC_RP_SCOPES = env_str("OVERSIGHT_OIDC_SCOPES", "openid email profile groups")
OIDC_RP_SIGN_ALGO = env_str("OVERSIGHT_OIDC_SIGN_ALGORITHM", "RS256")
OIDC_TIMEOUT = env_int("OVERSIGHT_OIDC_TIMEOUT_SECONDS", 10, minimum=1)
OIDC_USE_PKCE = True
OIDC_STORE_ID_TOKEN = True  # to end the provider's session too at sign-out
OVERSIGHT_OIDC_NAME = env_str("OVERSIGHT_OIDC_NAME", "single sign-on")
OVERSIGHT_OIDC_GROUPS_CLAIM = env_str("OVERSIGHT_OIDC_GROUPS_CLAIM", "groups")
OVERSIGHT_OIDC_ROLES = env_role_rules("OVERSIGHT_OIDC_ROLES")
OVERSIGHT_PASSWORD_SIGN_IN = env_bool("OVERSIGHT_PASSWORD_SIGN_IN", default=True)
OVERSIGHT_BREAK_GLASS_USERS = env_list("OVERSIGHT_BREAK_GLASS_USERS")
if not OVERSIGHT_PASSWORD_SIGN_IN and not OVERSIGHT_OIDC_ISSUER:
    raise ImproperlyConfigured(
        "OVERSIGHT_PASSWORD_SIGN_IN is off but OVERSIGHT_OIDC_ISSUER is not set: "
        "nobody but the break-glass admins could sign in"
    )

# Sessions end after this long without activity, and this long after signing in
# whatever happened since (runs.middleware.SessionLifetimeMiddleware).
OVERSIGHT_SESSION_IDLE_SECONDS = env_int("OVERSIGHT_SESSION_IDLE_SECONDS", 30 * 60, minimum=60)
OVERSIGHT_SESSION_MAX_SECONDS = env_int(
    "OVERSIGHT_SESSION_MAX_SECONDS", 12 * 3600, minimum=OVERSIGHT_SESSION_IDLE_SECONDS
)
SESSION_COOKIE_AGE = OVERSIGHT_SESSION_MAX_SECONDS
# A role the provider's groups gave lasts this long after the sign-in that last confirmed
# it (runs/services/memberships.py): the longest a person removed from a group at the
# provider keeps it, by any way in (a Slack button needs no session).
OVERSIGHT_OIDC_ROLE_SECONDS = env_int(
    "OVERSIGHT_OIDC_ROLE_SECONDS", OVERSIGHT_SESSION_MAX_SECONDS, minimum=60
)

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        )
    },
}

# Alert and notification emails: SMTP unless in debug, where they are printed. How long
# the SMTP server may take to answer before a send fails; the workers' claims on a
# delivery or a batch last longer, so none is sent twice.
OVERSIGHT_EMAIL_TIMEOUT = env_int("OVERSIGHT_EMAIL_TIMEOUT_SECONDS", 10, minimum=1)
_SMTP = "django.core.mail.backends.smtp.EmailBackend"
_EMAIL_BACKEND = env_str(
    "OVERSIGHT_EMAIL_BACKEND",
    "django.core.mail.backends.console.EmailBackend" if DEBUG else _SMTP,
)
MAILERS = {"default": {"BACKEND": _EMAIL_BACKEND}}
if _EMAIL_BACKEND == _SMTP:
    # With MAILERS the SMTP backend reads no EMAIL_* settings: it needs its server here,
    # and a timeout (it has none by default). Other backends refuse unknown options.
    # STARTTLS (usually port 587) or TLS from the first byte (465), not both.
    _use_tls = env_bool("OVERSIGHT_EMAIL_USE_TLS", default=False)
    _use_ssl = env_bool("OVERSIGHT_EMAIL_USE_SSL", default=False)
    if _use_tls and _use_ssl:
        raise ImproperlyConfigured(
            "OVERSIGHT_EMAIL_USE_TLS (STARTTLS) and OVERSIGHT_EMAIL_USE_SSL (implicit TLS) "
            "exclude each other: set one"
        )
    MAILERS["default"]["OPTIONS"] = {
        "host": env_str("OVERSIGHT_EMAIL_HOST", "localhost"),
        "port": env_int(
            "OVERSIGHT_EMAIL_PORT", 465 if _use_ssl else 587 if _use_tls else 25, minimum=1
        ),
        "timeout": OVERSIGHT_EMAIL_TIMEOUT,
    }
    if _use_tls or _use_ssl:
        MAILERS["default"]["OPTIONS"] |= {"use_tls": _use_tls, "use_ssl": _use_ssl}
    if _user := env_str("OVERSIGHT_EMAIL_USER", ""):
        MAILERS["default"]["OPTIONS"] |= {
            "username": _user,
            "password": env_str("OVERSIGHT_EMAIL_PASSWORD"),
        }
DEFAULT_FROM_EMAIL = env_str("OVERSIGHT_FROM_EMAIL", "oversight@localhost")

SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = env_bool("OVERSIGHT_SECURE_COOKIES", default=not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE

# HTTPS. Unless in debug, plain-HTTP requests are redirected and browsers are told to use
# HTTPS only, for a year by default. Not redirected: /healthz, for load balancers, and
# /metrics, for a Prometheus inside the network (its bearer token then crosses that
# network in clear: scrape over HTTPS where the network is not trusted). Behind a
# TLS-terminating proxy, name the header it sets, e.g. X-Forwarded-Proto=https: only a
# proxy that overwrites that header may be trusted with it.
SECURE_PROXY_SSL_HEADER = env_ssl_header("OVERSIGHT_PROXY_SSL_HEADER")
SECURE_SSL_REDIRECT = env_bool("OVERSIGHT_SSL_REDIRECT", default=not DEBUG)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]
SECURE_HSTS_SECONDS = env_int("OVERSIGHT_HSTS_SECONDS", 0 if DEBUG else 365 * 24 * 3600, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("OVERSIGHT_HSTS_INCLUDE_SUBDOMAINS", default=True)
SECURE_HSTS_PRELOAD = env_bool("OVERSIGHT_HSTS_PRELOAD", default=False)

# Content Security Policy: scripts, styles, images and requests from this origin only;
# no inline script or style, no eval (htmx's eval-based features are off, base.html).
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}

# --- Oversight ---------------------------------------------------------------------------

# Content-addressed artifact blobs (sha256) in the artifact store (runs/artifact_store.py):
# a local folder next to the database, or an object store shared by several machines.
OVERSIGHT_ARTIFACT_ROOT = Path(env_str("OVERSIGHT_ARTIFACT_ROOT", str(VAR_DIR / "artifacts")))
STORAGES["artifacts"] = artifact_storage(env_str("OVERSIGHT_ARTIFACT_STORE", ""))
OVERSIGHT_ARTIFACT_MAX_BYTES = env_int("OVERSIGHT_ARTIFACT_MAX_BYTES", 25 * 2**20, minimum=1)
# How long a proposal waits for a decision before it ends as expired (fail closed).
OVERSIGHT_DECISION_TIMEOUT = timedelta(
    seconds=env_int("OVERSIGHT_DECISION_TIMEOUT_SECONDS", 24 * 3600, minimum=1)
)
# How long an approval stays valid for execution.
OVERSIGHT_APPROVAL_TTL = timedelta(
    seconds=env_int("OVERSIGHT_APPROVAL_TTL_SECONDS", 3600, minimum=1)
)

# The actions workers execute: built-in ones plus any listed (dotted paths to classes).
OVERSIGHT_ACTIONS = env_list(
    "OVERSIGHT_ACTIONS",
    [
        "runs.actions.files.FileWrite",
        "runs.actions.ledger.LedgerTransfer",
        "runs.actions.email.SendEmail",
        "runs.actions.http.HttpRequest",
    ],
)
# Where file.write writes: each project in its own sandbox, project-<id>/, that no path
# may leave.
OVERSIGHT_WORKSPACE = Path(env_str("OVERSIGHT_WORKSPACE", str(VAR_DIR / "workspace")))
# Hosts (host or host:port) that http.request may call.
OVERSIGHT_HTTP_ALLOWED_HOSTS = env_list("OVERSIGHT_HTTP_ALLOWED_HOSTS")
# Those of them that deduplicate by Idempotency-Key or refuse a stale
# Oversight-Fencing-Epoch: only for them may a worker fire again after a takeover.
OVERSIGHT_HTTP_DEDUPLICATING_HOSTS = env_list("OVERSIGHT_HTTP_DEDUPLICATING_HOSTS")
if _strangers := set(OVERSIGHT_HTTP_DEDUPLICATING_HOSTS) - set(OVERSIGHT_HTTP_ALLOWED_HOSTS):
    raise ImproperlyConfigured(
        "OVERSIGHT_HTTP_DEDUPLICATING_HOSTS names hosts that are not in "
        f"OVERSIGHT_HTTP_ALLOWED_HOSTS: {', '.join(sorted(_strangers))}"
    )
OVERSIGHT_HTTP_TIMEOUT = env_int("OVERSIGHT_HTTP_TIMEOUT_SECONDS", 10, minimum=1)
# The budget of each request http.request makes (a worker's, a reviewer's preview): one
# deadline over connecting, sending and the whole answer, and the most bytes of an
# answer's body read. Healthy targets answer within half a second; one that has not
# finished by the deadline has hung. By default the timeout above (10 s), so that an
# installation that raised it for a slow target keeps its calls; an attempt's four
# requests up to its verdict (precondition, snapshot, call, verification) then end
# within 40 s, inside the 60 s lease.
OVERSIGHT_HTTP_DEADLINE = env_int(
    "OVERSIGHT_HTTP_DEADLINE_SECONDS", OVERSIGHT_HTTP_TIMEOUT, minimum=1
)
OVERSIGHT_HTTP_MAX_RESPONSE_BYTES = env_int("OVERSIGHT_HTTP_MAX_RESPONSE_BYTES", 2**20, minimum=1)
# Domains email.send may write to; empty means any.
OVERSIGHT_EMAIL_ALLOWED_DOMAINS = env_list("OVERSIGHT_EMAIL_ALLOWED_DOMAINS")
# A worker's claim on an operation; must exceed the slowest action's run time.
OVERSIGHT_LEASE_SECONDS = env_int("OVERSIGHT_LEASE_SECONDS", 60, minimum=1)
# How long after an agent's lease lapsed before its operation is settled (failed, or alerted).
OVERSIGHT_AGENT_GRACE_SECONDS = env_int("OVERSIGHT_AGENT_GRACE_SECONDS", 300, minimum=1)
# Attempts (claims) an operation gets when it keeps failing unexpectedly (a bug, a
# target that cannot be reached) before it ends failed, or goes to its rollback plan.
OVERSIGHT_MAX_ATTEMPTS = env_int("OVERSIGHT_MAX_ATTEMPTS", 3, minimum=1)
# Effects one worker process carries out at once (each in a thread, holding a database
# connection while it runs), and at most how many of them wait on one target (a lane).
OVERSIGHT_WORKER_EFFECTS = env_int("OVERSIGHT_WORKER_EFFECTS", 32, minimum=1)
OVERSIGHT_LANE_EFFECTS = env_int("OVERSIGHT_LANE_EFFECTS", 16, minimum=1)
# A lane pauses after this many answers in a row that were none (a timeout, a connection
# refused, a 5xx), first for the backoff, doubling up to the longest.
OVERSIGHT_LANE_FAILURES = env_int("OVERSIGHT_LANE_FAILURES", 5, minimum=1)
OVERSIGHT_LANE_BACKOFF_SECONDS = env_int("OVERSIGHT_LANE_BACKOFF_SECONDS", 5, minimum=1)
OVERSIGHT_LANE_LONGEST_BACKOFF_SECONDS = env_int(
    "OVERSIGHT_LANE_LONGEST_BACKOFF_SECONDS", 300, minimum=OVERSIGHT_LANE_BACKOFF_SECONDS
)
# The approvals queue highlights proposals waiting longer than this.
OVERSIGHT_REVIEW_SLA_MINUTES = env_int("OVERSIGHT_REVIEW_SLA_MINUTES", 30, minimum=1)
# Where people reach this Oversight (for links in emails).
OVERSIGHT_BASE_URL = env_str("OVERSIGHT_BASE_URL", "http://127.0.0.1:8000")
# /healthz: a worker's heartbeat (written each minute) older than this is not alive; more
# alert deliveries pending than this is a backlog.
# At least two beats (a minute apart), or a healthy worker would flap.
OVERSIGHT_HEALTH_WORKER_SECONDS = env_int("OVERSIGHT_HEALTH_WORKER_SECONDS", 180, minimum=120)
OVERSIGHT_HEALTH_DELIVERY_BACKLOG = env_int("OVERSIGHT_HEALTH_DELIVERY_BACKLOG", 100, minimum=0)
# /metrics answers Prometheus only when it sends this as a bearer token; unset, there is
# no /metrics (404). Long and random: it is all that guards the numbers.
OVERSIGHT_METRICS_TOKEN = env_str("OVERSIGHT_METRICS_TOKEN", "").strip()
if OVERSIGHT_METRICS_TOKEN and len(OVERSIGHT_METRICS_TOKEN) < 32:
    raise ImproperlyConfigured("OVERSIGHT_METRICS_TOKEN must be at least 32 characters")
# Slack (docs/operating/slack.md): the app's bot token (xoxb-…) posts and updates the
# messages, its signing secret proves that a button press came from Slack. Both unset:
# no Slack. Where Slack's Web API is (a test's fake on loopback sets it).
OVERSIGHT_SLACK_BOT_TOKEN = env_str("OVERSIGHT_SLACK_BOT_TOKEN", "").strip()
OVERSIGHT_SLACK_SIGNING_SECRET = env_str("OVERSIGHT_SLACK_SIGNING_SECRET", "").strip()
OVERSIGHT_SLACK_API_URL = env_str("OVERSIGHT_SLACK_API_URL", "https://slack.com/api/")
if bool(OVERSIGHT_SLACK_BOT_TOKEN) != bool(OVERSIGHT_SLACK_SIGNING_SECRET):
    raise ImproperlyConfigured(
        "OVERSIGHT_SLACK_BOT_TOKEN and OVERSIGHT_SLACK_SIGNING_SECRET are set together"
    )
# Reviewers get at most one email per this many minutes about new pending operations.
OVERSIGHT_NOTIFY_BATCH_MINUTES = env_int("OVERSIGHT_NOTIFY_BATCH_MINUTES", 5, minimum=1)
# Message payloads of finished runs older than this are redacted by the
# redact_messages command (their sha256 is kept).
OVERSIGHT_MESSAGE_RETENTION_DAYS = env_int("OVERSIGHT_MESSAGE_RETENTION_DAYS", 365, minimum=1)
# The agent API's limits: whole request body, operation arguments, message payloads,
# nesting depth, long-poll wait, page size.
OVERSIGHT_API_MAX_BODY_BYTES = env_int("OVERSIGHT_API_MAX_BODY_BYTES", 8 * 2**20, minimum=1024)
OVERSIGHT_API_MAX_ARGUMENTS_BYTES = env_int(
    "OVERSIGHT_API_MAX_ARGUMENTS_BYTES", 256 * 1024, minimum=1
)
OVERSIGHT_API_MAX_MESSAGE_BYTES = env_int("OVERSIGHT_API_MAX_MESSAGE_BYTES", 64 * 1024, minimum=1)
OVERSIGHT_API_MAX_DEPTH = env_int("OVERSIGHT_API_MAX_DEPTH", 20, minimum=1)
OVERSIGHT_API_MAX_WAIT_SECONDS = env_int("OVERSIGHT_API_MAX_WAIT_SECONDS", 30, minimum=0)
OVERSIGHT_API_MAX_PAGE = env_int("OVERSIGHT_API_MAX_PAGE", 500, minimum=1)
# Concurrent long-polls (?wait=N) per token and in all, on this host; beyond them a
# wait gets 429 with Retry-After. Under the production server a waiting long-poll holds
# no thread and no database connection, only its socket and two open files; under
# runserver (the demo) it holds a thread.
OVERSIGHT_API_MAX_WAITS_PER_TOKEN = env_int("OVERSIGHT_API_MAX_WAITS_PER_TOKEN", 8, minimum=1)
OVERSIGHT_API_MAX_WAITS = env_int("OVERSIGHT_API_MAX_WAITS", 2048, minimum=1)
# The production server (manage.py serve, bin/serve): where it listens, its processes,
# each one's threads for every request but waiting long-polls, and the PostgreSQL
# connections each may hold at once (a pool).
OVERSIGHT_BIND = env_str("OVERSIGHT_BIND", "127.0.0.1:8000")
OVERSIGHT_WEB_PROCESSES = env_int("OVERSIGHT_WEB_PROCESSES", 2, minimum=1)
OVERSIGHT_WEB_THREADS = env_int("OVERSIGHT_WEB_THREADS", 16, minimum=1)
OVERSIGHT_WEB_DB_CONNECTIONS = env_int("OVERSIGHT_WEB_DB_CONNECTIONS", 20, minimum=1)
# A request's body is read whole, on the event loop, before the request takes a thread:
# one that has not arrived within this many seconds in all is answered 408 (a body that
# never comes would otherwise hold a thread for good); one larger than
# DATA_UPLOAD_MAX_MEMORY_SIZE, 413.
OVERSIGHT_WEB_BODY_SECONDS = env_int("OVERSIGHT_WEB_BODY_SECONDS", 30, minimum=1)
# How long a request waits for one of them (all in use, or PostgreSQL out of reach)
# before it is answered 503 with Retry-After, which the client waits out and retries.
OVERSIGHT_WEB_DB_WAIT_SECONDS = env_int("OVERSIGHT_WEB_DB_WAIT_SECONDS", 2, minimum=1)
# A stored answer to an Idempotency-Key is replayed for this long; a retry sent later
# runs as a new request. At least the client's whole retry window (minutes).
OVERSIGHT_API_REPLAY_TTL = timedelta(
    seconds=env_int("OVERSIGHT_API_REPLAY_TTL_SECONDS", 24 * 3600, minimum=600)
)
DATA_UPLOAD_MAX_MEMORY_SIZE = OVERSIGHT_API_MAX_BODY_BYTES + 1024

# Out-of-band alerts go to the project's admins by email, to these addresses, and to
# the webhook if set; a failed delivery is retried, further and further apart, for the
# retry span after its alert (a day), and, if set, for at most the attempt limit.
OVERSIGHT_ALERT_EMAILS = env_list("OVERSIGHT_ALERT_EMAILS")
OVERSIGHT_ALERT_WEBHOOK_URL = env_str("OVERSIGHT_ALERT_WEBHOOK_URL", "")
OVERSIGHT_ALERT_RETRY = timedelta(hours=env_int("OVERSIGHT_ALERT_RETRY_HOURS", 24, minimum=1))
OVERSIGHT_ALERT_MAX_ATTEMPTS = env_int("OVERSIGHT_ALERT_MAX_ATTEMPTS", 0, minimum=1) or None

# The server log, on standard error: text, or one JSON object per line (runs/logs.py).
OVERSIGHT_LOG_FORMAT = env_str("OVERSIGHT_LOG_FORMAT", "text")
if OVERSIGHT_LOG_FORMAT not in {"text", "json"}:
    raise ImproperlyConfigured(
        f"OVERSIGHT_LOG_FORMAT must be text or json, not {OVERSIGHT_LOG_FORMAT!r}"
    )
OVERSIGHT_LOG_LEVEL = env_str("OVERSIGHT_LOG_LEVEL", "INFO").upper()
if OVERSIGHT_LOG_LEVEL not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
    raise ImproperlyConfigured(
        "OVERSIGHT_LOG_LEVEL must be DEBUG, INFO, WARNING, ERROR or CRITICAL, "
        f"not {OVERSIGHT_LOG_LEVEL.lower()!r}"
    )
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "runs.logs.Context"}},
    "formatters": {
        "json": {"()": "runs.logs.JsonFormatter"},
        "text": {"()": "runs.logs.TextFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "filters": ["context"],
            "formatter": OVERSIGHT_LOG_FORMAT,
        }
    },
    "root": {"handlers": ["console"], "level": OVERSIGHT_LOG_LEVEL},
}
