"""A worker that claims one operation and stops itself (SIGSTOP) once its intent is
recorded, printing ``PAUSED``; after SIGCONT it fires, verifies and records, within its
lease (60 s), then exits: ``python -m tests.restore_child``. Its stop is the moment a
backup is taken (tests/test_backup_archive.py), and its effect then lands after it."""

import os
import signal
from datetime import timedelta

import django

django.setup()

from runs.engine.boundaries import INTENT, boundary_reached  # noqa: E402
from runs.engine.claims import claim_next  # noqa: E402
from runs.engine.executor import Execution  # noqa: E402

LEASE = timedelta(seconds=60)


def stop_at_intent(boundary: str, operation, **_kwargs) -> None:
    if boundary == INTENT:
        print("PAUSED", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)


boundary_reached.connect(stop_at_intent)
Execution(claim_next(worker="before-the-backup", lease=LEASE), "before-the-backup", LEASE).run()
