"""What the operator's commands share (``list_runs``, ``show_run``, ``list_alerts``,
``cancel_run``, ``resolve_alert``, ``requeue_operation``): for when the web is down, or for scripts.

A command that changes something acts as a named Oversight user (``--as``), through the
same service as the page, with the same role required in the run's project; its
checkpoint names that person, as the page's would. What a command lists it prints as
aligned text for people or, with ``--json``, as one JSON object per line for scripts.
A mistake (no such run, no such user, a role missing, a reason left out) is one line on
standard error and exit status 1."""

import json
from collections.abc import Iterable

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from runs.errors import OversightError


class Listing(BaseCommand):
    """A command that lists rows newest first: ``--project``, ``--limit``, ``--json``
    and the filters of ``add_filters``; ``columns`` maps each column to its field."""

    columns: dict[str, str]

    def add_arguments(self, parser) -> None:
        parser.add_argument("--project", help="A project's slug.")
        parser.add_argument("--limit", type=int, default=50, help="At most this many (50).")
        add_output_arguments(parser)
        self.add_filters(parser)

    def add_filters(self, parser) -> None:
        """The command's own filters."""

    def listed(self, **filters):
        """The rows to list, filtered by the command's own filters."""
        raise NotImplementedError

    def handle(self, *args, project, limit, json, **options) -> None:
        rows = self.listed(**options).order_by("-created_at", "-pk")
        if project:
            rows = rows.filter(project__slug=project)
        values = rows.values(*self.columns.values())[: max(limit, 0)]
        named = ({name: row[field] for name, field in self.columns.items()} for row in values)
        write_rows(self.stdout, named, json)


def add_output_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="One JSON object per line.")


def add_operator_argument(parser) -> None:
    parser.add_argument(
        "--as",
        dest="acting_as",
        required=True,
        help="The Oversight user acting (their role in the project is checked, and the "
        "checkpoint names them).",
    )


def operator(username: str):
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None:
        raise CommandError(f"no active user named {username!r}")
    return user


def found(rows, pk: int, what: str):
    """The row ``pk`` of the queryset ``rows``, or a one-line error naming it."""
    row = rows.filter(pk=pk).first()
    if row is None:
        raise CommandError(f"no {what} {pk}")
    return row


def refused(error: OversightError) -> CommandError:
    """A service's refusal (a role missing, a run already ended, a reason left out),
    in its own words."""
    return CommandError(str(error))


def write_rows(stdout, rows: Iterable[dict], as_json: bool) -> None:
    rows = list(rows)
    if as_json:
        for row in rows:
            stdout.write(json.dumps(row, default=_as_text))
        return
    if not rows:
        return
    columns = list(rows[0])
    widths = {c: max(len(c), *(len(_cell(row[c])) for row in rows)) for c in columns}
    stdout.write("  ".join(c.upper().ljust(widths[c]) for c in columns).rstrip())
    for row in rows:
        stdout.write("  ".join(_cell(row[c]).ljust(widths[c]) for c in columns).rstrip())


def _as_text(value) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _cell(value) -> str:
    if value is None or value == "":
        return "-"
    text = value.isoformat(timespec="seconds") if hasattr(value, "isoformat") else str(value)
    return " ".join(text.split())[:60]
