"""Streaming export of a search result as CSV or JSON Lines.

Rows are read in keyset batches (the same cursor as the pages), never all at once and
never in one long read transaction, so memory stays constant for a million rows and
writers are not held up; they are sent in chunks of about 64 KB, not a line at a time
(each chunk costs the server a write). The first line records the query, who exported
it and when.

Each batch is read with the queryset's own SQL but without Django's per-value
converters, and each checkpoint's state goes out as the JSON text the database holds,
never decoded and encoded again: those two made up half of an export's time. The text
is the same value on either backend, written as that backend stores it.
"""

import csv
import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime

from django.core.exceptions import EmptyResultSet
from django.db import connections
from django.db.models import QuerySet

from runs.audit.search import Sort, beyond
from runs.models import Checkpoint
from runs.replica import Lag

BATCH = 2000

COLUMNS = {
    "id": "id",
    "created_at": "created_at",
    "project": "project__slug",
    "run": "run_id",
    "session": "run__session_id",
    "seq": "seq",
    "event": "event",
    "from_status": "from_status",
    "to_status": "to_status",
    "actor_kind": "actor_kind",
    "actor": "actor_label",
    "operation": "operation_id",
    "action": "operation__action",
    "risk": "operation__risk",
    "reason": "reason",
    "state": "state",
    "prev_hash": "prev_hash",
    "hash": "hash",
}
CREATED_AT = list(COLUMNS).index("created_at")
STATE = list(COLUMNS).index("state")
# The columns whose text people and agents choose (the rest are numbers, times, hashes,
# JSON objects and the product's own names).
FREE_TEXT = [list(COLUMNS).index(name) for name in ("project", "actor", "action", "reason")]


def records(queryset: QuerySet[Checkpoint], sort: Sort) -> Iterator[list]:
    """Every checkpoint of ``queryset`` as a list of the ``COLUMNS``' values, in ``sort``
    order."""
    names, lookups = list(COLUMNS), list(COLUMNS.values())
    key = [names.index(_column(field)) for field in sort.fields]
    ordered = queryset.order_by(*sort.order()).values_list(*lookups)
    window = ordered
    while batch := _raw(window[:BATCH]):
        for row in batch:  # SQLite gives the stored UTC time without its zone.
            if row[CREATED_AT].tzinfo is None:
                row[CREATED_AT] = row[CREATED_AT].replace(tzinfo=UTC)
        # The next batch's bound, read before the rows go out to be written (and changed).
        last = [batch[-1][i] for i in key]
        for row in batch:
            row[CREATED_AT] = row[CREATED_AT].astimezone(UTC).isoformat()
            yield row
        window = ordered.filter(beyond(sort, last, reverse=False))


def _raw(queryset: QuerySet) -> list[list]:
    """The rows of ``queryset`` as the database driver gives them (a JSON field as text)."""
    try:
        sql, params = queryset.query.get_compiler(using=queryset.db).as_sql()
    except EmptyResultSet:
        return []
    with connections[queryset.db].cursor() as cursor:
        cursor.execute(sql, params)
        return [list(row) for row in cursor.fetchall()]


def _column(field: str) -> str:
    return {"run_id": "run"}.get(field, field)


def header(query: str, user, now: datetime, lag: Lag | None = None) -> dict:
    """What the export is; read from a replica that lags (``lag``), since when its
    checkpoints are missing."""
    meta = {
        "export": "oversight checkpoints",
        "query": query,
        "exported_by": user.get_username(),
        "exported_at": now.astimezone(UTC).isoformat(),
    }
    if lag:
        meta["replica_lacks_checkpoints_since"] = lag.since.astimezone(UTC).isoformat()
    return meta


FORMULA_STARTS = frozenset("=+-@\t\r")
CHUNK = 64 * 1024  # characters sent in one piece (each piece costs the server a write)


def csv_lines(meta: dict, rows: Iterator[list]) -> Iterator[str]:
    """CSV, after ``#`` comment lines that carry the export header, in chunks of whole
    lines."""
    out = io.StringIO()
    out.writelines(f"# {name}: {value}\n" for name, value in meta.items())
    writer = csv.writer(out)
    writer.writerow(list(COLUMNS))
    for row in rows:
        # A spreadsheet runs a cell that starts like a formula; a leading quote keeps
        # people's and agents' text from becoming one (OWASP's advice on CSV injection).
        for i in FREE_TEXT:
            if (value := row[i]) and value[0] in FORMULA_STARTS:
                row[i] = "'" + value
        writer.writerow(row)
        if out.tell() >= CHUNK:
            yield _taken(out)
    if rest := _taken(out):
        yield rest


def jsonl_lines(meta: dict, rows: Iterator[list]) -> Iterator[str]:
    """JSON Lines: the header object first, then one checkpoint per line, in chunks of
    whole lines."""
    out = io.StringIO()
    out.write(json.dumps(meta, ensure_ascii=False) + "\n")
    names = [name for name in COLUMNS if name != "state"]
    encode = json.JSONEncoder(ensure_ascii=False).encode
    for row in rows:
        state = row.pop(STATE)
        # The state's text goes in as it is, the last member of the line's object.
        out.write(f'{encode(dict(zip(names, row, strict=True)))[:-1]}, "state": {state}}}\n')
        if out.tell() >= CHUNK:
            yield _taken(out)
    if rest := _taken(out):
        yield rest


def _taken(out: io.StringIO) -> str:
    """What ``out`` holds, leaving it empty."""
    text = out.getvalue()
    out.seek(0)
    out.truncate()
    return text
