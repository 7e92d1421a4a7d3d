"""What every bench sets before Django starts, and the servers and workers it starts
inherit: a throwaway ``OVERSIGHT_VAR_DIR`` (so a fresh SQLite database) unless one is
given, a secret key, and the settings module; optionally production settings on plain
HTTP over loopback, with no proxy in front. A bench puts the checkout on ``sys.path``,
then calls ``start_django`` before importing anything of the project's."""

import logging
import os
import tempfile
from pathlib import Path

import django

ROOT = Path(__file__).resolve().parent.parent


def start_django(
    *, production_http: bool = False, var_prefix: str = "oversight-bench-", **defaults: str
) -> None:
    """``defaults``: further settings of the environment, unless already set."""
    os.environ.setdefault("OVERSIGHT_VAR_DIR", tempfile.mkdtemp(prefix=var_prefix))
    os.environ.setdefault("OVERSIGHT_SECRET_KEY", "bench-only-secret-key-0123456789abcdef")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "oversight.settings")
    if production_http:
        os.environ["OVERSIGHT_DEBUG"] = "false"
        os.environ["OVERSIGHT_SSL_REDIRECT"] = "false"
    for name, value in defaults.items():
        os.environ.setdefault(name, value)
    django.setup()
    # The bench prints its figures, not a line per checkpoint it writes; the servers and
    # workers it starts log as in production.
    logging.disable(logging.INFO)
