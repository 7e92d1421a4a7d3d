"""The release before this code, for the tests of a rolling upgrade: its version, its
commit in this repository's history, and the last migration it shipped.

At each release, this becomes the release just made (docs/operating/upgrading.md says
so): the new code's migrations must then let that release's processes keep working."""

import subprocess
import tarfile
from io import BytesIO
from pathlib import Path

from tests.processes import ROOT

VERSION = "0.2.0"
COMMIT = "8d1e1b90ddf1b6db67713a5f577fb3d2e2880b36"
LAST_MIGRATION = ("runs", "0021_notification_order")
# Why this release's web processes must be stopped before the new schema is migrated
# (docs/operating/upgrading.md), as the database words it; "" when they may run on
# through it. 0.2.0's agents ask for a choice or data without a request's kind (runs
# 0024), and its web process inserts the default kind, a sign-off, which the new
# check refuses for a request with choices or a schema.
WEB_STOP = "request_kind_fits_its_shape"


def unpack(into: Path) -> Path:
    """The release's files, from git, in ``into``: its ``manage.py`` runs against this
    test run's database with this checkout's packages (a release's dependencies are a
    subset of the next one's, which upgrades none past a major version)."""
    archived = subprocess.run(
        ["git", "archive", "--format=tar", COMMIT],
        cwd=ROOT,
        capture_output=True,
    )
    assert archived.returncode == 0, (
        f"release {VERSION}'s commit {COMMIT[:12]} is not in this checkout "
        f"({archived.stderr.decode().strip()}): a shallow clone needs `git fetch --unshallow`"
    )
    with tarfile.open(fileobj=BytesIO(archived.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into
