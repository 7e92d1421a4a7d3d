"""Streaming export of a search result as CSV or JSON Lines.

Rows are read in keyset batches (the same cursor as the pages), never all at once and
never in one long read transaction, so memory stays constant for a million rows and
writers are not held up. The first line records the query, who exported it and when.
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


def records(queryset: QuerySet[Checkpoint], sort: Sort) -> Iterator[dict]:
    """Every checkpoint of ``queryset`` as a plain dict, in ``sort`` order."""
    names, lookups = list(COLUMNS), list(COLUMNS.values())
    key = [names.index(_column(field)) for field in sort.fields]
    ordered = queryset.order_by(*sort.order()).values_list(*lookups)
    window = ordered
    while batch := list(window[:BATCH]):
        for row in batch:
            record = dict(zip(names, row, strict=True))
            record["created_at"] = record["created_at"].astimezone(UTC).isoformat()
            yield record
        last = batch[-1]
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


def csv_lines(meta: dict, rows: Iterator[dict]) -> Iterator[str]:
    """CSV, after ``#`` comment lines that carry the export header."""
    yield from (f"# {name}: {value}\n" for name, value in meta.items())
    line = _Line()
    writer = csv.writer(line)
    yield writer.writerow(list(COLUMNS))
    for row in rows:
        row["state"] = json.dumps(row["state"], sort_keys=True, ensure_ascii=False)
        yield writer.writerow([_cell(value) for value in row.values()])


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _cell(value) -> str | int:
    """Spreadsheets run a cell that starts like a formula; a leading quote keeps an
    agent's text from becoming one (OWASP's advice for CSV injection)."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def jsonl_lines(meta: dict, rows: Iterator[dict]) -> Iterator[str]:
    """JSON Lines: the header object first, then one checkpoint per line."""
    yield json.dumps(meta, ensure_ascii=False) + "\n"
    for row in rows:
        yield json.dumps(row, ensure_ascii=False) + "\n"


class _Line:
    """A file-like object whose ``write`` returns the line instead of storing it."""

    def write(self, value: str) -> str:
        return value
