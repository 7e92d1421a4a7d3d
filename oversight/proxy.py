"""What Oversight believes from the reverse proxy in front of it, and only when told to.

Behind a TLS-terminating proxy the scheme and the client's address arrive in headers
that any client could also send; Django and the sign-in throttle read them only when the
deployment names the header its own proxy sets (docs/operating/security.md).
"""

import ipaddress
import re

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from oversight.env import env_str

_HEADER = re.compile(r"[A-Za-z0-9_-]+")


def meta_name(variable: str, header: str) -> str:
    """``X-Forwarded-For`` (or ``HTTP_X_FORWARDED_FOR``) as Django's ``request.META`` key."""
    header = header.strip()
    if not _HEADER.fullmatch(header):
        raise ImproperlyConfigured(f"{variable} must name an HTTP header, not {header!r}")
    name = header.upper().replace("-", "_")
    return name if name.startswith("HTTP_") else f"HTTP_{name}"


def env_ssl_header(variable: str) -> tuple[str, str] | None:
    """``SECURE_PROXY_SSL_HEADER`` from ``HEADER=value``, e.g. ``X-Forwarded-Proto=https``."""
    raw = env_str(variable, "")
    if not raw:
        return None
    header, equals, value = raw.partition("=")
    if not equals or not value.strip():
        raise ImproperlyConfigured(f"{variable} must be HEADER=value, not {raw!r}")
    return meta_name(variable, header), value.strip()


def env_client_ip_header(variable: str) -> str:
    raw = env_str(variable, "")
    return meta_name(variable, raw) if raw else ""


def client_ip(request) -> str | None:
    """The address that sign-in failures are counted against.

    With ``OVERSIGHT_CLIENT_IP_HEADER`` set, the right-most address of that header: the
    one the deployment's own proxy wrote (addresses to its left came from the client and
    may be forged). A request without a valid one did not come through the proxy, so its
    socket address is the client's.
    """
    header = settings.OVERSIGHT_CLIENT_IP_HEADER
    if header:
        forwarded = request.META.get(header, "").rpartition(",")[2].strip()
        try:
            return str(ipaddress.ip_address(forwarded))
        except ValueError:
            pass
    return request.META.get("REMOTE_ADDR")
