"""Test settings: the project's settings with test-only overrides.

The SQLite test database is a file (not Django's default in-memory one) so that
several connections — threads, and child processes killed mid-transaction — share it.
A child process started by a test finds that database through OVERSIGHT_TEST_DB_NAME.
"""

import os
import tempfile
from pathlib import Path

os.environ.setdefault("OVERSIGHT_SECRET_KEY", "test-secret-key-that-is-long-enough-for-checks")
os.environ.setdefault("OVERSIGHT_VAR_DIR", str(Path(tempfile.gettempdir()) / "oversight-tests"))
# Most tests hold their transaction open for the whole test (pytest-django's ``db``),
# waiting on child processes and servers between two queries: PostgreSQL must not end
# their sessions. The tests of that bound give their child processes one.
os.environ.setdefault("OVERSIGHT_DB_IDLE_IN_TRANSACTION_SECONDS", "0")
# Never the store of the shell the suite runs in (a production bucket, once sourced):
# the local folder, or the test's own object store, named for its child processes.
os.environ["OVERSIGHT_ARTIFACT_STORE"] = os.environ.get("OVERSIGHT_TEST_ARTIFACT_STORE", "")
# Nor the shell's read replica: tests/test_read_replica.py feeds one of its own.
os.environ.pop("DATABASE_REPLICA_URL", None)

from oversight.settings import *  # noqa: F403
from oversight.settings import DATABASES, VAR_DIR

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# The test client and live server speak plain HTTP; tests that check the redirect turn it on.
SECURE_SSL_REDIRECT = False
MAILERS = {"default": {"BACKEND": "django.core.mail.backends.locmem.EmailBackend"}}
STORAGES["staticfiles"]["BACKEND"] = "django.contrib.staticfiles.storage.StaticFilesStorage"  # noqa: F405

_default = DATABASES["default"]
# Threads (the live server's, the tests' own) must not keep connections past their
# request, or the test database cannot be dropped at the end.
_default["CONN_MAX_AGE"] = 0
if _default["ENGINE"].endswith("sqlite3"):
    _default["TEST"] = {"NAME": str(VAR_DIR / f"test-{os.getpid()}.sqlite3")}
if os.environ.get("OVERSIGHT_TEST_DB_NAME"):
    _default["NAME"] = os.environ["OVERSIGHT_TEST_DB_NAME"]
if os.environ.get("OVERSIGHT_TEST_REPLICA_NAME"):  # tests/test_read_replica.py's own
    DATABASES["replica"] = {**_default, "NAME": os.environ["OVERSIGHT_TEST_REPLICA_NAME"]}
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # noqa: F405
