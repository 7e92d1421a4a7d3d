"""A worker for the chaos soak that also stops itself (SIGSTOP) now and then where a
stopped process holds others up: inside the transaction that claims and carries out a
transfer, and inside a folder's lock just before it replaces the file. What the soak
then measures is how long anyone else waits for it.

    python bench/soak_worker.py NAME LEASE_SECONDS CHANCE SEED
"""

import os
import random
import signal
import sys
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.environment import start_django

start_django()

from runs.actions.files import FolderLock  # noqa: E402
from runs.engine.boundaries import INTENT, boundary_reached  # noqa: E402
from runs.engine.worker import Worker  # noqa: E402


def main(name: str, lease: float, chance: float, seed: int) -> None:
    dice = random.Random(seed)

    def maybe_stop() -> None:
        if dice.random() < chance:
            os.kill(os.getpid(), signal.SIGSTOP)

    def inside_the_transfers_transaction(boundary: str, operation, **_kwargs) -> None:
        if boundary == INTENT and operation.action == "ledger.transfer":
            maybe_stop()

    replace = FolderLock.replace

    def inside_the_folder_lock(lock: FolderLock, target: Path) -> None:
        maybe_stop()
        replace(lock, target)

    boundary_reached.connect(inside_the_transfers_transaction, weak=False)
    FolderLock.replace = inside_the_folder_lock
    Worker(name=name, lease=timedelta(seconds=lease)).run(idle_seconds=0.05)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]))
