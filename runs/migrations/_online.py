"""Index changes that do not stop writers on PostgreSQL: ``CREATE INDEX`` and ``DROP
INDEX`` there block every write to the table until they finish, so both are done
``CONCURRENTLY``, outside a transaction (a migration using these sets ``atomic =
False``). SQLite's writers queue on its one lock whatever is done, so it builds as
usual. Either way each step can be taken again: a migration interrupted half-way (each
statement commits on its own) runs again from the start, and an invalid index a failed
``CONCURRENTLY`` left behind is dropped before it is built again. Those statements run
without the bounds set on every other (``OVERSIGHT_DB_*``): they wait by design.

Not a migration itself: the loader skips modules whose name begins with ``_``.
"""

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import models


def add_index(schema_editor, model, index: models.Index) -> None:
    _drop_if_there(schema_editor, index)
    with _unbounded(schema_editor):
        schema_editor.add_index(model, index, **_concurrently(schema_editor))


@contextmanager
def _unbounded(schema_editor) -> Iterator[None]:
    """A concurrent build waits for every transaction already open and takes as long as
    the table is large: PostgreSQL's bounds on lock waits and statements
    (``OVERSIGHT_DB_*``) would end it half-way."""
    if not _concurrently(schema_editor):
        yield
        return
    schema_editor.execute("SET lock_timeout = 0")
    schema_editor.execute("SET statement_timeout = 0")
    try:
        yield
    finally:
        schema_editor.execute("RESET lock_timeout")
        schema_editor.execute("RESET statement_timeout")


def remove_index(schema_editor, model, index: models.Index) -> None:
    _drop_if_there(schema_editor, index)


def _drop_if_there(schema_editor, index: models.Index) -> None:
    how = "CONCURRENTLY " if _concurrently(schema_editor) else ""
    with _unbounded(schema_editor):
        schema_editor.execute(f"DROP INDEX {how}IF EXISTS {schema_editor.quote_name(index.name)}")


def _concurrently(schema_editor) -> dict:
    return {"concurrently": True} if schema_editor.connection.vendor == "postgresql" else {}
