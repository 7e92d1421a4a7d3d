"""Trigram indexes for the audit's free-text search on PostgreSQL.

The search (``runs.audit.search``, ``q=``) asks for checkpoints whose reason or
decision comment contains the words, case-insensitively; no b-tree serves that, so a
word that matched nothing read every checkpoint (0.4 s at a million). ``pg_trgm``'s GIN
indexes serve ``LIKE '%…%'``. Each index is on the very expression Django writes for
``icontains`` (``UPPER(… ::text)``): an index on another spelling is not used.
``pg_trgm`` is a trusted extension (PostgreSQL 13 and later): the database's owner may
create it. SQLite has no such index; there the search reads newest first until it has
a page, as before.

Built ``CONCURRENTLY`` (so outside a transaction: ``atomic = False``): a plain
``CREATE INDEX`` stops every write to the table until it is built, and these take
minutes on a large history. An index a failed attempt left behind is invalid and would
satisfy ``IF NOT EXISTS``, so it is dropped first.
"""

from django.db import migrations

INDEXES = {
    "checkpoint_reason_trgm": 'UPPER("reason"::text)',
    "checkpoint_comment_trgm": """UPPER(("state" #>> '{decision,comment}')::text)""",
}


def create(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    for name, expression in INDEXES.items():
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        schema_editor.execute(
            f"CREATE INDEX CONCURRENTLY {name} ON runs_checkpoint"
            f" USING gin ({expression} gin_trgm_ops)"
        )


def drop(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in INDEXES:
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("runs", "0015_delivery_status_constraint"),
    ]

    operations = [migrations.RunPython(create, drop)]
