"""A project's numbers over the last days, for its admins: how long the queue is and
how long its oldest has waited at the end of each day, how long a person takes to decide
(p50, p95), who decides, how often reviewers reject or edit, and which actions fail
their verification or raise alerts. A fixed number of queries, whatever the project's
size.

Only people's decisions count as decisions here: a policy approves in the instant of
the proposal and is no reviewer, so counted among them its auto-approvals made the
median time to decision a fraction of a millisecond and put the policy at the head of
"who decides". What policies approved is counted apart (``by_policy``)."""

import math
from collections import Counter
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from django.db.models import Count, Min, OuterRef, Q, Subquery
from django.utils import timezone

from runs.models import Alert, Checkpoint, Decision, Operation, Project

DAYS = 30
FAILED_VERIFICATION = ("rolled_back", "compensated", "alerted")


@dataclass(frozen=True)
class Day:
    day: date
    waiting: int  # operations proposed and not yet decided at the end of the day
    oldest_seconds: float | None  # how long the oldest of them had waited (None: none)
    decided: int  # operations a person decided first that day
    p50_seconds: float | None  # time from proposal to a person's first decision, that day
    p95_seconds: float | None


@dataclass(frozen=True)
class Numbers:
    days: list[Day]
    deciders: list[tuple[str, int]]  # the people who decided, how often
    kinds: dict[str, int]  # people's decisions by kind: approve, edit, reject, reply
    by_policy: int  # operations approved by a policy, with no one deciding
    actions: list[tuple[str, int, int, int]]  # action: operations, failed verification, alerts

    @property
    def decisions(self) -> int:
        return sum(self.kinds.values())

    @property
    def rejected_percent(self) -> int:
        return self._percent("reject", "reply")

    @property
    def edited_percent(self) -> int:
        return self._percent("edit")

    def _percent(self, *kinds: str) -> int:
        counted = sum(self.kinds.get(kind, 0) for kind in kinds)
        return round(100 * counted / self.decisions) if self.decisions else 0


def numbers_of(project: Project, days: int = DAYS, now: datetime | None = None) -> Numbers:
    now = now or timezone.now()
    today = timezone.localdate(now)
    first = today - timedelta(days=days - 1)
    start = timezone.make_aware(datetime.combine(first, time.min))
    decisions = Decision.objects.filter(operation__project=project, created_at__gte=start)
    # One query for people and policies alike; a policy's rows have no reviewer.
    deciders = list(
        decisions.values_list("reviewer__username")
        .annotate(n=Count("pk"))
        .order_by("-n", "reviewer__username")
    )
    return Numbers(
        days=_days(project, first, today, start, now),
        deciders=[(reviewer, n) for reviewer, n in deciders if reviewer is not None],
        kinds=dict(
            decisions.filter(reviewer__isnull=False)
            .values_list("kind")
            .annotate(n=Count("pk"))
            .order_by()
        ),
        by_policy=sum(n for reviewer, n in deciders if reviewer is None),
        actions=_actions(project, start),
    )


def plain_duration(seconds: float | None) -> str:
    """A duration as people say it, to the second and in its two largest units: "under
    1 s", "42 s", "4 min 10 s", "2 h 5 min", "1 d 2 h"; "—" for none. Whole units, cut
    rather than rounded: a wait shown as "1 min" has lasted a minute."""
    if seconds is None:
        return "—"
    if seconds < 1:
        return "under 1 s"
    left = int(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if left >= size or parts:
            parts.append((left // size, unit))
            left %= size
    return " ".join(f"{n} {unit}" for n, unit in parts[:2] if n)


def _days(project: Project, first: date, today: date, start: datetime, now: datetime) -> list[Day]:
    left_queue = (
        Checkpoint.objects.filter(
            operation=OuterRef("pk"), event="operation.status", from_status="proposed"
        )
        .exclude(to_status="proposed")
        .order_by("created_at")
        .values("created_at")[:1]
    )
    spans = list(
        Operation.objects.filter(project=project)
        .annotate(left=Subquery(left_queue))
        .filter(Q(left__isnull=True) | Q(left__gte=start))
        .values_list("created_at", "left")
    )
    first_decisions = (
        Decision.objects.filter(operation__project=project, reviewer__isnull=False)
        .values("operation_id", "operation__created_at")
        .annotate(at=Min("created_at"))
        .filter(at__gte=start)
        .values_list("operation__created_at", "at")
    )
    waits: dict[date, list[float]] = {}
    for proposed, decided in first_decisions:
        seconds = (decided - proposed).total_seconds()
        waits.setdefault(timezone.localdate(decided), []).append(seconds)
    shown = []
    for offset in range((today - first).days + 1):
        day = first + timedelta(days=offset)
        end = min(timezone.make_aware(datetime.combine(day, time.max)), now)
        waiting = [p for p, left in spans if p <= end and (left is None or left > end)]
        oldest = max(((end - p).total_seconds() for p in waiting), default=None)
        seconds = sorted(waits.get(day, []))
        shown.append(
            Day(day, len(waiting), oldest, len(seconds), _pct(seconds, 50), _pct(seconds, 95))
        )
    return shown


def _pct(values: list[float], percent: int) -> float | None:
    """The nearest-rank percentile of sorted ``values`` (None for none)."""
    if not values:
        return None
    return values[max(0, math.ceil(percent / 100 * len(values)) - 1)]


def _actions(project: Project, start: datetime) -> list[tuple[str, int, int, int]]:
    operations = Operation.objects.filter(project=project, created_at__gte=start)
    counted = operations.values_list("action").annotate(
        n=Count("pk"), failed=Count("pk", filter=Q(status__in=FAILED_VERIFICATION))
    )
    alerts = Counter(
        dict(
            Alert.objects.filter(project=project, created_at__gte=start)
            .values_list("operation__action")
            .annotate(n=Count("pk"))
            .order_by()
        )
    )
    rows = {action: (n, failed, alerts.pop(action, 0)) for action, n, failed in counted.order_by()}
    rows |= {action or "(no operation)": (0, 0, n) for action, n in alerts.items()}
    return sorted(((a, *counts) for a, counts in rows.items()), key=lambda r: (-r[2] - r[3], r[0]))
