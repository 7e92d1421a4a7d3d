"""The auditor's search over checkpoints: a filter form whose fields live in the URL,
the queryset it selects (only from the user's projects), and keyset ("cursor")
pagination.

Keyset pagination asks for "the rows after this one" instead of "rows 50 000 to
50 050", so a page deep in millions of checkpoints costs the same as the first, and
checkpoints written while someone pages never shift the pages they have not seen yet.
"""

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from urllib.parse import urlencode

from django import forms
from django.db.models import Q, QuerySet
from django.utils import timezone

from runs import jsonsafe, machines
from runs.actors import ActorKind
from runs.forms import project_choices
from runs.models import Checkpoint, Decision, Operation, Project

PAGE_SIZE = 50

EVENTS = [
    ("run.created", "run created"),
    ("run.status", "run status"),
    ("operation.proposed", "operation proposed"),
    ("operation.approval", "approval (not yet enough)"),
    ("operation.edit", "edit (not yet enough approvals)"),
    ("operation.status", "operation status"),
    ("operation.intent", "execution intent"),
    ("operation.attempt_failed", "attempt failed (retried)"),
    ("operation.lease_taken_over", "lease taken over"),
    ("operation.rollback_intent", "rollback step taken"),
    ("request.created", "question asked"),
    ("request.status", "question answered, refused, expired or withdrawn"),
    ("alert.status", "alert status"),
    ("alert.send_again", "alert sent again"),
    ("artifact.attached", "artifact attached"),
    ("messages.redacted", "messages redacted"),
]

# Every status a checkpoint can reach: runs', operations', human requests' and alerts'.
STATUSES = sorted(
    {*machines.RUN.edges, *machines.OPERATION.edges, *machines.REQUEST.edges, *machines.ALERT.edges}
)


@dataclass(frozen=True)
class Sort:
    label: str
    fields: tuple[str, str]
    descending: bool

    def order(self, reverse: bool = False) -> list[str]:
        descending = self.descending != reverse
        return [f"-{f}" if descending else f for f in self.fields]

    def key(self, checkpoint: Checkpoint) -> list:
        first = getattr(checkpoint, self.fields[0])
        if isinstance(first, datetime):
            first = first.isoformat()
        return [first, getattr(checkpoint, self.fields[1])]


SORTS = {
    "newest": Sort("Newest first", ("created_at", "id"), descending=True),
    "oldest": Sort("Oldest first", ("created_at", "id"), descending=False),
    "run": Sort("By run, in chain order", ("run_id", "seq"), descending=False),
}


class AuditFilter(forms.Form):
    """Every field is optional; together they narrow the search (AND)."""

    q = forms.CharField(required=False, max_length=200, label="Text in reasons and comments")
    project = forms.ChoiceField(required=False)
    run = forms.IntegerField(required=False, min_value=1, max_value=jsonsafe.MAX_ROW_ID)
    session = forms.IntegerField(required=False, min_value=1, max_value=jsonsafe.MAX_ROW_ID)
    operation = forms.IntegerField(required=False, min_value=1, max_value=jsonsafe.MAX_ROW_ID)
    actor_kind = forms.ChoiceField(
        required=False, label="Actor", choices=[("", "Anyone"), *ActorKind.choices]
    )
    actor = forms.CharField(required=False, max_length=200, label="Actor name")
    event = forms.ChoiceField(required=False, label="Transition", choices=[("", "Any"), *EVENTS])
    status = forms.ChoiceField(
        required=False, label="To status", choices=[("", "Any"), *((s, s) for s in STATUSES)]
    )
    decision = forms.ChoiceField(
        required=False, choices=[("", "Any"), *Decision.Kind.choices], label="Decision"
    )
    action = forms.CharField(required=False, max_length=100)
    risk = forms.ChoiceField(required=False, choices=[("", "Any risk"), *Operation.Risk.choices])
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    sort = forms.ChoiceField(
        required=False, choices=[(key, sort.label) for key, sort in SORTS.items()]
    )

    def __init__(self, *args, projects: list[Project], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.projects = projects
        self.fields["project"].choices = project_choices(projects)

    def clean(self):
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since and until and since > until:
            self.add_error("until", "The end date is before the start date.")
        for field, day, days in (("since", since, 0), ("until", until, 1)):
            try:
                data[f"{field}_at"] = _day_start(day, days)
            except OverflowError:
                self.add_error(field, "Choose a date between the years 1 and 9998.")
        return data

    @property
    def ordering(self) -> Sort:
        key = self.cleaned_data.get("sort") if self.is_valid() else None
        return SORTS[key or "newest"]

    def checkpoints(self) -> QuerySet[Checkpoint]:
        """The matching checkpoints in the user's projects (none if the form is invalid)."""
        visible = [p.pk for p in self.projects]
        queryset = Checkpoint.objects.filter(project_id__in=visible)
        if not self.is_valid():
            return queryset.none()
        data = self.cleaned_data
        project = next((p.pk for p in self.projects if p.slug == data["project"]), None)
        exact = {
            "project_id": project,
            "run_id": data["run"],
            "run__session_id": data["session"],
            "operation_id": data["operation"],
            "actor_kind": data["actor_kind"],
            "actor_label": data["actor"].strip(),
            "event": data["event"],
            "to_status": data["status"],
            "state__decision__kind": data["decision"],
            "operation__action": data["action"].strip(),
            "operation__risk": data["risk"],
            "created_at__gte": data["since_at"],
            "created_at__lt": data["until_at"],
        }
        queryset = queryset.filter(**{k: v for k, v in exact.items() if v})
        if text := data["q"].strip():
            queryset = queryset.filter(
                Q(reason__icontains=text) | Q(state__decision__comment__icontains=text)
            )
        return queryset

    def described(self) -> str:
        """The query as a URL query string, for export headers and links."""
        if not self.is_valid():
            return ""
        return urlencode(sorted((k, v) for k, v in self.data.items() if k in self.fields and v))


def _day_start(day: date | None, days: int = 0) -> datetime | None:
    """Midnight at the start of ``day`` (+ ``days``) in the viewer's time zone."""
    if day is None:
        return None
    midnight = timezone.make_aware(datetime.combine(day + timedelta(days=days), time.min))
    return midnight.astimezone(UTC)


class BadCursor(ValueError):
    pass


def encode_cursor(values: list) -> str:
    return base64.urlsafe_b64encode(json.dumps(values).encode()).decode().rstrip("=")


def _id(value) -> int:
    if type(value) is not int or not 0 < value <= jsonsafe.MAX_ROW_ID:
        raise ValueError(value)
    return value


def decode_cursor(token: str, sort: Sort) -> list:
    """The row a page link points after (or before), checked: a link that was edited by
    hand is refused with one message, never passed to the database as it is."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        first, second = jsonsafe.parse(raw, field="cursor")  # Refused is a ValueError.
        if sort.fields[0] == "created_at":
            first = datetime.fromisoformat(first)
            if first.tzinfo is None:
                raise ValueError(first)
            first = first.astimezone(UTC)
        else:
            first = _id(first)
        second = _id(second)
    except (ValueError, TypeError, OverflowError, binascii.Error, UnicodeDecodeError):
        raise BadCursor("This page link is not valid any more; showing the first page.") from None
    return [first, second]


def beyond(sort: Sort, values: list, *, reverse: bool) -> Q:
    """Rows strictly after ``values`` in ``sort`` order (before them if ``reverse``).

    Written as ``a <= x AND (a < x OR b < y)`` rather than ``a < x OR (a = x AND b < y)``:
    the same rows, but the first term is a range an index can seek to, where the plain
    OR made SQLite walk the index from the start: a page half a million rows deep took
    ten times as long as the first; now it takes the same."""
    first, second = sort.fields
    op = "lt" if sort.descending != reverse else "gt"
    return Q(**{f"{first}__{op}e": values[0]}) & (
        Q(**{f"{first}__{op}": values[0]}) | Q(**{f"{second}__{op}": values[1]})
    )


@dataclass
class Page:
    rows: list[Checkpoint]
    newer: str | None  # cursor for the page before this one
    older: str | None  # cursor for the page after this one


def paginate(
    queryset: QuerySet[Checkpoint],
    sort: Sort,
    *,
    after: str | None = None,
    before: str | None = None,
    size: int = PAGE_SIZE,
) -> Page:
    """One page of ``queryset`` in ``sort`` order, after the row ``after`` names or
    before the row ``before`` names (or from the start). One query."""
    if before:
        window = queryset.filter(beyond(sort, decode_cursor(before, sort), reverse=True))
        rows = list(window.order_by(*sort.order(reverse=True))[: size + 1])
        has_more = len(rows) > size
        rows = rows[:size][::-1]
        return Page(
            rows,
            newer=encode_cursor(sort.key(rows[0])) if has_more else None,
            older=encode_cursor(sort.key(rows[-1])) if rows else None,
        )
    if after:
        queryset = queryset.filter(beyond(sort, decode_cursor(after, sort), reverse=False))
    rows = list(queryset.order_by(*sort.order())[: size + 1])
    has_more = len(rows) > size
    rows = rows[:size]
    return Page(
        rows,
        newer=encode_cursor(sort.key(rows[0])) if after and rows else None,
        older=encode_cursor(sort.key(rows[-1])) if has_more else None,
    )
