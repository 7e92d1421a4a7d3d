"""Small helpers that read settings from the environment and fail loudly on bad values.

Each helper raises ``ImproperlyConfigured`` naming the variable and what it expected,
so a typo in a deployment stops the process at start-up instead of misbehaving later.
"""

import os
import secrets
import time
from pathlib import Path
from typing import NamedTuple
from urllib.parse import parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str:
    value = os.environ.get(name, default)
    if value is None:
        raise ImproperlyConfigured(f"{name} must be set")
    return value


def local_secret(var_dir: Path) -> str:
    """The installation's own secret key, made once and kept in ``var_dir`` (readable by
    its owner only), so that the server and every command in every shell agree without
    a key exported by hand. A production deployment sets OVERSIGHT_SECRET_KEY instead
    (which wins): machines sharing a database must share the key."""
    path = var_dir / "secret_key"
    try:
        var_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # made before, or by a command started at the same moment
        return _read_secret(path)
    except OSError as error:
        raise ImproperlyConfigured(
            f"OVERSIGHT_SECRET_KEY is not set and {path} cannot be created ({error.strerror})"
        ) from None
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_urlsafe(48))
        out.flush()
        os.fsync(out.fileno())
    return _read_secret(path)


def _read_secret(path: Path) -> str:
    for _ in range(50):  # another process may be writing it this very moment
        try:
            key = path.read_text().strip()
        except OSError as error:  # made by another user (root?), or not a file
            raise ImproperlyConfigured(
                f"OVERSIGHT_SECRET_KEY is not set and {path} cannot be read ({error.strerror})"
            ) from None
        if len(key) >= 32:
            return key
        time.sleep(0.01)
    raise ImproperlyConfigured(
        f"{path} must hold a secret key of at least 32 characters (or set OVERSIGHT_SECRET_KEY)"
    )


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    if raw.strip().lower() in _TRUE:
        return True
    if raw.strip().lower() in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, not {raw!r}")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, not {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {value}")
    return value


def env_list(name: str, default: list[str] | None = None) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return list(default or [])
    return [item.strip() for item in raw.split(",") if item.strip()]


# runs.models.Role's values: the settings are read before the apps are loaded.
ROLE_NAMES = ("reviewer", "auditor", "admin")


class RoleRule(NamedTuple):
    """Members of the provider's ``group`` get ``role`` in the project ``project``."""

    group: str
    project: str
    role: str


def env_role_rules(name: str) -> tuple[RoleRule, ...]:
    """Rules ``GROUP=PROJECT:ROLE``, separated by commas (a group's name may hold spaces,
    not commas): ``payments-reviewers=payments:reviewer, auditors=payments:auditor``."""
    rules = []
    for item in env_list(name):
        group, equals, grant = item.rpartition("=")
        project, colon, role = grant.strip().partition(":")
        if not (equals and colon and group.strip() and project):
            raise ImproperlyConfigured(f"{name}: {item!r} is not GROUP=PROJECT:ROLE")
        if role not in ROLE_NAMES:
            raise ImproperlyConfigured(
                f"{name}: {item!r} names the role {role!r}; roles are {', '.join(ROLE_NAMES)}"
            )
        rules.append(RoleRule(group.strip(), project, role))
    return tuple(rules)


def env_issuer(name: str) -> str:
    """An OpenID issuer's URL: HTTPS, or HTTP on this machine only (a test's provider)."""
    issuer = env_str(name, "")
    if not issuer:
        return ""
    parts = urlsplit(issuer)
    local = parts.scheme == "http" and parts.hostname in {"127.0.0.1", "localhost", "::1"}
    if not (parts.scheme == "https" or local) or not parts.hostname or parts.query:
        raise ImproperlyConfigured(f"{name} must be an https:// URL, not {issuer!r}")
    return issuer


def sqlite_database(path: Path, *, synchronous: str) -> dict:
    """SQLite as the embedded default: WAL, BEGIN IMMEDIATE transactions, a busy timeout.

    ``transaction_mode=IMMEDIATE`` makes every ``atomic()`` take the write lock up front,
    so two writers queue on the busy timeout instead of failing mid-transaction when
    a read lock cannot be upgraded (seed 000). The backend is Django's, whose
    transactions hold a lock that makes the workers' claims give way to them
    (``oversight.sqlite3.writes``).
    """
    if synchronous not in {"FULL", "NORMAL"}:
        raise ImproperlyConfigured(
            f"OVERSIGHT_SQLITE_SYNCHRONOUS must be FULL or NORMAL, not {synchronous!r}"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    return {
        "ENGINE": "oversight.sqlite3",
        "NAME": str(path),
        "OPTIONS": {
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": (
                f"PRAGMA journal_mode=WAL;PRAGMA synchronous={synchronous};PRAGMA foreign_keys=ON;"
            ),
        },
    }


def database_from_url(url: str, setting: str = "DATABASE_URL") -> dict:
    """Parse ``postgres://user:password@host:port/name?option=value`` into Django's form;
    an error names ``setting``, the variable the URL came from."""
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql"}:
        raise ImproperlyConfigured(
            f"{setting} must start with postgres:// or postgresql://, not {parts.scheme!r}://"
        )
    name = unquote(parts.path.lstrip("/"))
    if not name:
        raise ImproperlyConfigured(f"{setting} must name a database: postgres://…/NAME")
    try:
        port = parts.port
    except ValueError:
        raise ImproperlyConfigured(f"{setting} has an invalid port") from None
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(port or ""),
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
        "OPTIONS": dict(parse_qsl(parts.query)),
    }


def bound_postgres_sessions(database: dict, *, idle: int, lock_wait: int, statement: int) -> None:
    """Have PostgreSQL end, by itself, what a stopped process would otherwise hold without
    end (seconds; 0 leaves one unbounded): a session idle inside its transaction (rolled
    back, its row locks released), a wait for a lock, a statement. Set per connection
    through libpq's ``options``, after any the URL gave."""
    bounds = {
        "idle_in_transaction_session_timeout": idle,
        "lock_timeout": lock_wait,
        "statement_timeout": statement,
    }
    given = database["OPTIONS"].get("options", "")
    settings = " ".join(f"-c {name}={seconds * 1000}" for name, seconds in bounds.items())
    database["OPTIONS"]["options"] = f"{given} {settings}".strip()


# What an object store's URL may say besides its bucket and prefix, and the S3
# backend's option each sets.
S3_OPTIONS = {"endpoint_url": "endpoint_url", "region": "region_name"}
ADDRESSING_STYLES = {"path", "virtual", "auto"}
# Seconds: to connect, and to wait for each answer (a store far away may need more).
TIMEOUTS = {"connect_timeout": 3, "read_timeout": 10}


def artifact_storage(url: str) -> dict:
    """``STORAGES["artifacts"]``: the local folder (``OVERSIGHT_ARTIFACT_ROOT``) when
    ``url`` is empty; else the S3-compatible object store it names,
    ``s3://bucket[/prefix][?endpoint_url=…&region=…&addressing_style=path]``, and
    ``connect_timeout`` and ``read_timeout`` in seconds.

    Credentials are never in the URL: boto3 reads them from ``AWS_ACCESS_KEY_ID`` and
    ``AWS_SECRET_ACCESS_KEY`` (or the machine's role). Every request to the store is
    bounded (3 s to connect, 10 s to read, 2 attempts: 27 s at worst, by default): a store that
    hangs holds a worker or a request that long at most, and then counts as out of
    reach. Checksums are sent only where a request needs one: several S3-compatible
    stores refuse the CRC headers boto3 adds by default. A blob read spills to a
    temporary file past 1 MiB instead of being held in memory whole."""
    if not url:
        return {"BACKEND": "runs.artifact_store.DurableFileSystemStorage"}
    name = "OVERSIGHT_ARTIFACT_STORE"
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        raise ImproperlyConfigured(f"{name} must be s3://bucket[/prefix][?options], not {url!r}")
    if "@" in parts.netloc:
        raise ImproperlyConfigured(
            f"{name} must not carry credentials: set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY instead"
        )
    options = dict(parse_qsl(parts.query))
    style = options.pop("addressing_style", "auto")
    timeouts = {key: options.pop(key, default) for key, default in TIMEOUTS.items()}
    if unknown := sorted(set(options) - set(S3_OPTIONS)):
        known = ", ".join(sorted([*S3_OPTIONS, "addressing_style", *TIMEOUTS]))
        raise ImproperlyConfigured(f"{name} has an unknown option {unknown[0]!r} (known: {known})")
    if style not in ADDRESSING_STYLES:
        raise ImproperlyConfigured(f"{name}: addressing_style must be path, virtual or auto")
    for key, value in timeouts.items():
        try:
            timeouts[key] = float(value)
        except ValueError:
            timeouts[key] = 0
        if not 0 < timeouts[key] <= 300:
            raise ImproperlyConfigured(f"{name}: {key} must be seconds, over 0 and at most 300")
    from botocore.config import Config  # Only where an object store is configured.

    return {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": parts.netloc,
            "location": unquote(parts.path).strip("/"),
            **{S3_OPTIONS[key]: value for key, value in options.items()},
            "file_overwrite": True,
            "default_acl": None,
            "max_memory_size": 2**20,
            "client_config": Config(
                **timeouts,
                retries={"total_max_attempts": 2, "mode": "standard"},
                s3={"addressing_style": style},
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
        },
    }
