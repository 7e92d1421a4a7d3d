"""Index changes that do not stop writers on PostgreSQL: ``CREATE INDEX`` and ``DROP
INDEX`` there block every write to the table until they finish, so both are done
``CONCURRENTLY``, outside a transaction (a migration using these sets ``atomic =
False``). SQLite's writers queue on its one lock whatever is done, so it builds as
usual. Either way each step can be taken again: a migration interrupted half-way (each
statement commits on its own) runs again from the start, and an invalid index a failed
``CONCURRENTLY`` left behind is dropped before it is built again.

Not a migration itself: the loader skips modules whose name begins with ``_``.
"""

from django.db import models


def add_index(schema_editor, model, index: models.Index) -> None:
    _drop_if_there(schema_editor, index)
    schema_editor.add_index(model, index, **_concurrently(schema_editor))


def remove_index(schema_editor, model, index: models.Index) -> None:
    _drop_if_there(schema_editor, index)


def _drop_if_there(schema_editor, index: models.Index) -> None:
    how = "CONCURRENTLY " if _concurrently(schema_editor) else ""
    schema_editor.execute(f"DROP INDEX {how}IF EXISTS {schema_editor.quote_name(index.name)}")


def _concurrently(schema_editor) -> dict:
    return {"concurrently": True} if schema_editor.connection.vendor == "postgresql" else {}
