"""Index changes that do not stop writers on PostgreSQL: ``CREATE INDEX`` and ``DROP
INDEX`` there block every write to the table until they finish, so both are done
``CONCURRENTLY``, outside a transaction (a migration using these sets ``atomic =
False``). An invalid index a failed attempt left behind is dropped before building it
again. SQLite's writers queue on its one lock whatever is done, so it builds as usual.

Not a migration itself: the loader skips modules whose name begins with ``_``.
"""

from django.db import models


def add_index(schema_editor, model, index: models.Index) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return schema_editor.add_index(model, index)
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {index.name}")
    schema_editor.add_index(model, index, concurrently=True)


def remove_index(schema_editor, model, index: models.Index) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return schema_editor.remove_index(model, index)
    schema_editor.remove_index(model, index, concurrently=True)
