"""Streaming export of a search result as CSV or JSON Lines.

Rows are read in keyset batches (the same cursor as the pages), never all at once and
never in one long read transaction, so memory stays constant for a million rows and
writers are not held up; they are sent in chunks of about 64 KB, not a line at a time
(each chunk costs the server a write). The first line records the query, who exported
it and when.
"""

import csv
import json
from collections.abc import Iterator
from datetime import UTC, datetime

from django.db.models import QuerySet

from runs.audit.search import Sort, beyond
from runs.models import Checkpoint

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


def records(queryset: QuerySet[Checkpoint], sort: Sort) -> Iterator[list]:
    """Every checkpoint of ``queryset`` as a list of the ``COLUMNS``' values, in ``sort``
    order."""
    names, lookups = list(COLUMNS), list(COLUMNS.values())
    key = [names.index(_column(field)) for field in sort.fields]
    created_at = names.index("created_at")
    ordered = queryset.order_by(*sort.order()).values_list(*lookups)
    window = ordered
    while batch := list(window[:BATCH]):
        last = batch[-1]
        for row in batch:
            row = list(row)
            row[created_at] = row[created_at].astimezone(UTC).isoformat()
            yield row
        window = ordered.filter(beyond(sort, [last[i] for i in key], reverse=False))


def _column(field: str) -> str:
    return {"run_id": "run"}.get(field, field)


def header(query: str, user, now: datetime) -> dict:
    return {
        "export": "oversight checkpoints",
        "query": query,
        "exported_by": user.get_username(),
        "exported_at": now.astimezone(UTC).isoformat(),
    }


def csv_lines(meta: dict, rows: Iterator[list]) -> Iterator[str]:
    """CSV, after ``#`` comment lines that carry the export header."""
    return _chunked(_csv(meta, rows))


def jsonl_lines(meta: dict, rows: Iterator[list]) -> Iterator[str]:
    """JSON Lines: the header object first, then one checkpoint per line."""
    return _chunked(_jsonl(meta, rows))


STATE = list(COLUMNS).index("state")
FORMULA_STARTS = frozenset("=+-@\t\r")


def _csv(meta: dict, rows: Iterator[list]) -> Iterator[str]:
    yield from (f"# {name}: {value}\n" for name, value in meta.items())
    writer = csv.writer(_Line())
    yield writer.writerow(list(COLUMNS))
    for row in rows:
        row[STATE] = json.dumps(row[STATE], sort_keys=True, ensure_ascii=False)
        # A spreadsheet runs a cell that starts like a formula; a leading quote keeps an
        # agent's text from becoming one (OWASP's advice for CSV injection).
        yield writer.writerow(
            ["'" + v if v.__class__ is str and v[:1] in FORMULA_STARTS else v for v in row]
        )


def _jsonl(meta: dict, rows: Iterator[list]) -> Iterator[str]:
    yield json.dumps(meta, ensure_ascii=False) + "\n"
    names = list(COLUMNS)
    for row in rows:
        yield json.dumps(dict(zip(names, row, strict=True)), ensure_ascii=False) + "\n"


CHUNK = 64 * 1024


def _chunked(lines: Iterator[str]) -> Iterator[str]:
    """``lines`` joined into chunks of about ``CHUNK`` characters."""
    chunk, size = [], 0
    for line in lines:
        chunk.append(line)
        size += len(line)
        if size >= CHUNK:
            yield "".join(chunk)
            chunk, size = [], 0
    if chunk:
        yield "".join(chunk)


class _Line:
    """A file-like object whose ``write`` returns the line instead of storing it."""

    def write(self, value: str) -> str:
        return value
