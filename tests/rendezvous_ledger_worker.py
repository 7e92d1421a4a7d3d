"""``python -m tests.rendezvous_ledger_worker DIR``: ``runworker --once`` whose first
transfer, on PostgreSQL, meets another such worker's inside the transactions that claim
and make them. About to lock its first account, it waits until the other is about to
lock too; once it holds its first lock, it waits until the other holds its own or is
waiting for a lock. So two transfers in opposite directions interleave as in the
deadlock they once made, every time; it prints MET when they did, and fails if the
other never came (files in DIR say who is where). SQLite writes one transaction at
a time: there the worker just drains."""

import os
import sys
from datetime import timedelta
from pathlib import Path

import django

django.setup()

from django.db import connection  # noqa: E402

from runs.engine.worker import Worker  # noqa: E402
from tests.overlap import DEADLINE_SECONDS, lock_waiters  # noqa: E402
from tests.processes import wait_until  # noqa: E402


def main(folder: Path) -> None:
    first = []

    def meet_at_the_first_lock(execute, sql, params, many, context):
        if first or '"runs_account"' not in sql or "FOR UPDATE" not in sql:
            return execute(sql, params, many, context)
        first.append(sql)
        arrive(folder, "about")
        result = execute(sql, params, many, context)
        arrive(folder, "locked", also=lock_waiters)
        print("MET", flush=True)
        return result

    worker = Worker(name=f"meeting-{os.getpid()}", lease=timedelta(seconds=60))
    if connection.vendor != "postgresql":
        return worker.drain()
    with connection.execute_wrapper(meet_at_the_first_lock):
        worker.drain()


def arrive(folder: Path, where: str, also=lambda: False) -> None:
    """Say this worker is at ``where``; return once the other is there too (or
    ``also()``); fail if it never comes."""
    (folder / f"{os.getpid()}.{where}").touch()

    def there() -> bool:
        return len(list(folder.glob(f"*.{where}"))) == 2 or also()

    wait_until(there, DEADLINE_SECONDS, f"the other worker reaching {where}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
