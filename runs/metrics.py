"""What ``/metrics`` tells Prometheus, read from the database when it asks.

The web and the workers are separate processes, often on several machines, so no
process holds the numbers in memory: every scrape reads them from the database, and any
web process answers the same. Each family is one grouped query (or a column of the
projects' query), so a scrape costs the same number of queries however much data there
is. Ages are measured in the database's clock (``runs.clock``). Counters are counts of
rows that only ever grow (decisions, ended operations, takeover checkpoints, deliveries
given up), so they behave as counters across restarts of any process.
"""

from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count, OuterRef, Q, Subquery, Sum
from django.db.models.functions import Coalesce
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from runs import machines
from runs.actions.registry import registered
from runs.clock import db_now
from runs.engine.claims import TAKEN_OVER
from runs.models import (
    Alert,
    AlertDelivery,
    Checkpoint,
    Decision,
    HumanRequest,
    Operation,
    Project,
    WorkerHeartbeat,
)
from runs.models.workers import WorkerPause
from runs.paused_lanes import operator_pauses, paused_lanes

# Upper bounds (seconds) of the duration histograms' buckets; +Inf comes last.
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# A worker's heartbeat is shown for this many times OVERSIGHT_HEALTH_WORKER_SECONDS:
# long enough to see it go stale, not forever. A restarted worker has a new name
# (host:pid) and the old name's row is never deleted, so showing every row would add
# a series per restart, each aging forever.
WORKER_SHOWN_FOR = 10
OTHER_ACTION = "other"


def exposition() -> bytes:
    """The metrics in Prometheus' text format (``prometheus_client.CONTENT_TYPE_LATEST``)."""
    registry = CollectorRegistry()
    registry.register(OversightCollector())
    return generate_latest(registry)


class OversightCollector:
    """Every family, from the database, at each scrape."""

    def collect(self) -> Iterator[Metric]:
        now = db_now()
        projects = list(_projects())
        slugs = {project["pk"]: project["slug"] for project in projects}
        yield from _project_gauges(projects, now)
        yield _decisions(slugs)
        yield _operations(slugs)
        yield _durations("execution", "executing an operation's effect")
        yield _durations("verification", "verifying an operation's effect")
        yield _takeovers(slugs)
        yield from _deliveries()
        yield from _workers(now)
        yield _paused()
        yield _held()


def _count_in_project(model, **filters) -> Coalesce:
    """How many rows of ``model`` in the outer query's project match ``filters``."""
    rows = model.objects.filter(project=OuterRef("pk"), **filters).order_by().values("project")
    return Coalesce(Subquery(rows.annotate(n=Count("pk")).values("n")), 0)


def _projects():
    """Every project, with or without data, so that no series disappears."""
    pending = Operation.objects.filter(project=OuterRef("pk"), status=Operation.Status.PROPOSED)
    return (
        Project.objects.order_by("slug")
        .annotate(
            queue_depth=_count_in_project(Operation, status=Operation.Status.PROPOSED),
            oldest_proposed=Subquery(pending.order_by("created_at").values("created_at")[:1]),
            requests_waiting=_count_in_project(HumanRequest, status=HumanRequest.Status.OPEN),
            alerts_open=_count_in_project(Alert, status=Alert.Status.OPEN),
        )
        .values("pk", "slug", "queue_depth", "oldest_proposed", "requests_waiting", "alerts_open")
    )


def _project_gauges(projects: list[dict], now: datetime) -> Iterator[Metric]:
    families = {
        "queue_depth": ("oversight_queue_depth", "Operations awaiting a decision."),
        "oldest_proposed": (
            "oversight_queue_oldest_age_seconds",
            "How long the oldest operation awaiting a decision has waited (0: none).",
        ),
        "requests_waiting": ("oversight_requests_waiting", "Human requests awaiting an answer."),
        "alerts_open": (
            "oversight_alerts_open",
            "Out-of-band alerts no one has acknowledged yet.",
        ),
    }
    for column, (name, documentation) in families.items():
        family = GaugeMetricFamily(name, documentation, labels=["project"])
        for project in projects:
            value = project[column]
            if column == "oldest_proposed":
                value = max(0.0, (now - value).total_seconds()) if value else 0.0
            family.add_metric([project["slug"]], value)
        yield family


def _decisions(slugs: dict[int, str]) -> Metric:
    counts = Counter({(slug, kind): 0 for slug in slugs.values() for kind in Decision.Kind.values})
    rows = Decision.objects.order_by().values_list("operation__project", "kind")
    for project, kind, n in rows.annotate(n=Count("pk")):
        counts[slugs[project], kind] = n
    family = CounterMetricFamily(
        "oversight_decisions", "Decisions on operations, by kind.", labels=["project", "kind"]
    )
    for labels, n in sorted(counts.items()):
        family.add_metric(labels, n)
    return family


def _operations(slugs: dict[int, str]) -> Metric:
    family = CounterMetricFamily(
        "oversight_operations",
        "Operations that reached a final status, by action and status.",
        labels=["project", "action", "status"],
    )
    ended = Operation.objects.filter(status__in=machines.OPERATION.terminal).order_by()
    rows = ended.values_list("project", "action", "status").annotate(n=Count("pk"))
    counts = Counter()
    for project, action, status, n in rows:
        counts[slugs[project], _action_label(action), status] += n
    for labels, n in sorted(counts.items()):
        family.add_metric(labels, n)
    return family


def _action_label(action: str) -> str:
    """A registered action by its name; any other (an agent names the actions it
    executes itself) as ``other``, so that no agent can add series without end."""
    return action if action in registered() else OTHER_ACTION


def _durations(kind: str, what: str) -> Metric:
    """A histogram of ``Operation.<kind>_ms`` by action: cumulative bucket counts, sum
    and count, in one aggregate query."""
    field = f"{kind}_ms"
    buckets = {
        f"le_{i}": Count("pk", filter=Q(**{f"{field}__lte": round(bound * 1000)}))
        for i, bound in enumerate(BUCKETS)
    }
    measured = Operation.objects.filter(**{f"{field}__isnull": False}).order_by("action")
    rows = measured.values("action").annotate(**buckets, total_ms=Sum(field), n=Count("pk"))
    family = HistogramMetricFamily(
        f"oversight_{kind}_duration_seconds",
        f"Seconds spent {what}, as the worker measured it.",
        labels=["action"],
    )
    for row in rows:
        counts = [(floatToGoString(bound), row[f"le_{i}"]) for i, bound in enumerate(BUCKETS)]
        family.add_metric(
            [row["action"]], [*counts, ("+Inf", row["n"])], sum_value=row["total_ms"] / 1000
        )
    return family


def _takeovers(slugs: dict[int, str]) -> Metric:
    counts = dict.fromkeys(slugs, 0)
    rows = Checkpoint.objects.filter(event=TAKEN_OVER).order_by().values_list("project")
    counts.update(rows.annotate(n=Count("pk")))
    family = CounterMetricFamily(
        "oversight_lease_takeovers",
        "Operations claimed again after a worker's lease expired (a crash, a stall, a retry).",
        labels=["project"],
    )
    for project, n in sorted(counts.items(), key=lambda item: slugs[item[0]]):
        family.add_metric([slugs[project]], n)
    return family


def _deliveries() -> Iterator[Metric]:
    counts = AlertDelivery.objects.aggregate(
        failed=Count("pk", filter=Q(status=AlertDelivery.Status.FAILED)),
        pending=Count("pk", filter=Q(status=AlertDelivery.Status.PENDING)),
    )
    yield CounterMetricFamily(
        "oversight_alert_deliveries_failed",
        "Alert deliveries (email, webhook) given up after every attempt failed.",
        value=counts["failed"],
    )
    yield GaugeMetricFamily(
        "oversight_alert_deliveries_pending",
        "Alert deliveries not yet made (being retried, or due).",
        value=counts["pending"],
    )


def _workers(now: datetime) -> Iterator[Metric]:
    alive_for = settings.OVERSIGHT_HEALTH_WORKER_SECONDS
    shown_since = now - timedelta(seconds=WORKER_SHOWN_FOR * alive_for)
    heartbeats = WorkerHeartbeat.objects.filter(seen_at__gte=shown_since).order_by("name")
    ages = GaugeMetricFamily(
        "oversight_worker_heartbeat_age_seconds",
        "Seconds since each worker last said it was alive (about once a minute).",
        labels=["worker"],
    )
    alive = 0
    for name, seen_at in heartbeats.values_list("name", "seen_at"):
        age = max(0.0, (now - seen_at).total_seconds())
        ages.add_metric([name], age)
        alive += age <= alive_for
    yield ages
    yield GaugeMetricFamily(
        "oversight_workers_alive",
        "Workers whose heartbeat is younger than OVERSIGHT_HEALTH_WORKER_SECONDS.",
        value=alive,
    )


def _paused() -> Metric:
    """One series per paused lane, only while a live worker has it paused (a lane is
    named by its target, so there are as many as targets down, not as many as
    operations)."""
    family = GaugeMetricFamily(
        "oversight_lane_paused",
        "Live workers that paused the lane, its target having stopped answering.",
        labels=["lane"],
    )
    for lane, workers in sorted(Counter(pause.lane for pause in paused_lanes()).items()):
        family.add_metric([lane], workers)
    return family


def _held() -> Metric:
    """Operators' pauses: the series of every lane (``lane=""``) always, 1 while all
    workers are held, 0 otherwise, so that an alert rule can watch it; one more series
    per lane paused on its own, while it is."""
    family = GaugeMetricFamily(
        "oversight_workers_paused",
        'Workers held by an operator\'s pause: lane="" for every lane, else that lane.',
        labels=["lane"],
    )
    lanes = [pause.lane for pause in operator_pauses()]
    family.add_metric([WorkerPause.EVERY_LANE], int(WorkerPause.EVERY_LANE in lanes))
    for lane in lanes:
        if lane != WorkerPause.EVERY_LANE:
            family.add_metric([lane], 1)
    return family
