"""Django's SQLite backend, whose transactions say when a write is in hand.

Each transaction ``atomic()`` begins holds the database's ``Writes`` from before its
``BEGIN IMMEDIATE`` to its end (commit, rollback or close), unless the connection gives
way (a worker's claims, ``writes.giving_way``): it then waits, bounded, until no other
transaction holds them, and holds nothing itself.
"""

import time

from django.db import OperationalError
from django.db.backends.sqlite3 import base

from oversight.sqlite3.writes import LOOK_EVERY_SECONDS, Writes


class DatabaseWrapper(base.DatabaseWrapper):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.gives_way = False  # Set by ``writes.giving_way``.
        self.holding: Writes | None = None  # Held by the transaction in hand.

    def _start_transaction_under_autocommit(self) -> None:
        writes = None if self.is_in_memory_db() else Writes.of(self.settings_dict["NAME"])
        if writes is not None and self.gives_way:
            writes.give_way()
        elif writes is not None:
            writes.hold()
            self.holding = writes
        try:
            if self.holding is None:
                super()._start_transaction_under_autocommit()
            else:
                self._begin_soon()
        except BaseException:  # Busy past the timeout: no transaction to hold them for.
            self._let_go()
            raise

    def _begin_soon(self) -> None:
        """Begin, looking again every half millisecond while another transaction writes
        (a claim in hand: the next ones give way) rather than in SQLite's growing sleeps
        (up to 100 ms), during which the database would stand idle."""
        deadline = time.monotonic() + self.settings_dict["OPTIONS"].get("timeout", 5)
        self.connection.execute("PRAGMA busy_timeout = 0")
        try:
            while True:
                try:
                    return super()._start_transaction_under_autocommit()
                except OperationalError as error:
                    if "locked" not in str(error) or time.monotonic() >= deadline:
                        raise
                time.sleep(LOOK_EVERY_SECONDS)
        finally:
            timeout = self.settings_dict["OPTIONS"].get("timeout", 5)
            self.connection.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")

    def _commit(self):
        try:
            return super()._commit()
        finally:
            self._let_go()

    def _rollback(self):
        try:
            return super()._rollback()
        finally:
            self._let_go()

    def _close(self):
        try:
            return super()._close()
        finally:
            self._let_go()

    def _let_go(self) -> None:
        if self.holding is not None:
            self.holding, holding = None, self.holding
            holding.let_go()
