"""The database's clock: the one clock every process shares.

Leases, claims and deadlines are set and compared in the database's time, never in a
process's own: a worker on a host whose clock runs ahead would otherwise see live
leases as expired and take them over. On PostgreSQL this is the server's clock; on
SQLite (one machine by design) the machine's, read through SQLite itself.
"""

from datetime import UTC, datetime

from django.db import connection

QUERIES = {
    "postgresql": "SELECT statement_timestamp()",
    "sqlite": "SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')",
}


def db_now() -> datetime:
    """The database's current time (aware, UTC), read now."""
    with connection.cursor() as cursor:
        cursor.execute(QUERIES[connection.vendor])
        (value,) = cursor.fetchone()
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo else value.replace(tzinfo=UTC)
