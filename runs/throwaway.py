"""A database of one's own for a rehearsal or a soak, dropped afterwards."""

import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.db import connection


@contextmanager
def throwaway_database(purpose: str) -> Iterator[str]:
    """A fresh, migrated database that is the default connection for the duration and
    is dropped afterwards. Django's test-database machinery creates it under a name of
    our own (a file in a temporary folder on SQLite; a new database on PostgreSQL,
    which needs the CREATEDB privilege); nothing is written to the real database."""
    settings_dict = connection.settings_dict
    real_name, real_test = settings_dict["NAME"], settings_dict["TEST"]
    folder = tempfile.mkdtemp(prefix=f"oversight-{purpose}-")
    name = f"oversight_{purpose}_{os.getpid()}_{secrets.token_hex(3)}"
    if connection.vendor == "sqlite":
        name = str(Path(folder) / f"{purpose}.sqlite3")
    settings_dict["TEST"] = {**real_test, "NAME": name}
    try:
        connection.creation.create_test_db(verbosity=0, autoclobber=True)
        yield name
    finally:
        if settings_dict["NAME"] == name:  # Created, perhaps only half migrated.
            connection.creation.destroy_test_db(real_name, verbosity=0)
        settings_dict["TEST"] = real_test
        shutil.rmtree(folder, ignore_errors=True)
