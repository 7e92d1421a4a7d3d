"""The lanes that live workers paused because their target stopped answering
(``WorkerHeartbeat.paused_lanes``, written by each worker when a lane's circuit breaker
opens or closes; see ``runs.engine.lanes``), as ``/healthz``, ``/metrics`` and the
operation's page show them.

A worker that died keeps its last word in its row forever: only workers alive by the
rule of ``/healthz``'s workers check count (a heartbeat younger than
``OVERSIGHT_HEALTH_WORKER_SECONDS``, by the database's clock), or a lane would stay
"paused" long after anyone tries it. Each worker keeps breakers of its own, so a lane
may be paused by several workers, each with its own times.

An operator's pause (``WorkerPause``, every lane or one, until resumed) is another
thing: ``operator_pauses`` lists them for the same readers.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import DateTimeField, ExpressionWrapper, Value
from django.db.models.functions import Now

from runs.models import WorkerHeartbeat
from runs.models.workers import WorkerPause


@dataclass(frozen=True)
class PausedLane:
    lane: str
    worker: str
    since: datetime  # When the target stopped answering.
    retry_at: datetime  # When the worker sends one effect of the lane as a trial.


def paused_lanes() -> list[PausedLane]:
    """Every (lane, worker) pause of a live worker, by lane, the soonest trial first.
    One query, whatever the number of workers and lanes."""
    alive_since = ExpressionWrapper(
        Now() - Value(timedelta(seconds=settings.OVERSIGHT_HEALTH_WORKER_SECONDS)),
        output_field=DateTimeField(),
    )
    alive = WorkerHeartbeat.objects.filter(seen_at__gte=alive_since)
    paused = [
        PausedLane(
            lane,
            worker,
            datetime.fromisoformat(pause["since"]),
            datetime.fromisoformat(pause["retry_at"]),
        )
        for worker, lanes in alive.values_list("name", "paused_lanes")
        for lane, pause in lanes.items()
    ]
    return sorted(paused, key=lambda p: (p.lane, p.retry_at, p.worker))


def operator_pauses(*lanes: str) -> list[WorkerPause]:
    """The operators' pauses in force (of ``lanes`` only, if given), every lane's
    first: one query."""
    pauses = WorkerPause.objects.order_by("lane")
    return list(pauses.filter(lane__in=lanes) if lanes else pauses)
