"""Django's SQLite backend, whose transactions say when a write is in hand, and whose
statements have their placeholders converted once.

Each transaction ``atomic()`` begins holds the database's ``Writes`` from before its
``BEGIN IMMEDIATE`` to its end (commit, rollback or close), unless the connection gives
way (a worker's claims, ``writes.giving_way``): it then waits, bounded, until no other
transaction holds them, and holds nothing itself.
"""

import time
from functools import lru_cache

from django.db import OperationalError
from django.db.backends.sqlite3 import base

from oversight.sqlite3.writes import LOOK_EVERY_SECONDS, Writes


class CursorWrapper(base.SQLiteCursorWrapper):
    """Django's, converting a statement's ``%s`` to SQLite's ``?`` once per process
    rather than with a regular expression each time it is sent: the worker sends the
    same few dozen statements again and again, and the conversion was 5 % of a
    transfer's time."""

    def convert_query(self, query, *, param_names=None):
        if param_names is None:
            return _qmark_style(query)
        return super().convert_query(query, param_names=param_names)


@lru_cache(maxsize=4096)
def _qmark_style(query: str) -> str:
    return base.FORMAT_QMARK_REGEX.sub("?", query).replace("%%", "%")


class DatabaseWrapper(base.DatabaseWrapper):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.gives_way = False  # Set by ``writes.giving_way``.
        self.holding: Writes | None = None  # Held by the transaction in hand.

    def create_cursor(self, name=None):
        return self.connection.cursor(factory=CursorWrapper)

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
        timeout = self.settings_dict["OPTIONS"].get("timeout", 5)
        deadline = time.monotonic() + timeout
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
