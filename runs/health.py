"""What ``/healthz`` answers a load balancer or a monitor: whether the database is
reachable, its migrations applied, a worker alive (its heartbeat fresh), the alert
deliveries keeping up, every open alert delivered outside Oversight, how many lanes
live workers paused, what operators paused, and how many live workers cannot run
file.write (their workspace is not the shared one). Counts and ages only: no data (it
answers anyone)."""

from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.db.models import Exists, Max, OuterRef

from oversight.version import VERSION
from runs.clock import db_now
from runs.models import Alert, AlertDelivery, WorkerHeartbeat
from runs.models.workers import WorkerPause
from runs.paused_lanes import operator_pauses, paused_lanes

# Checks whose failure leaves Oversight up but not doing all it should: an alert that
# reached no one, or every worker held by an operator (or by a restore).
DEGRADING = {"open_alerts", "pauses", "workspace"}


def health(*, scope: str = "all") -> dict:
    """``{"ok": …, "status": …, "version": …, "checks": {name: {"ok": …, …}}}``; ``ok``
    only if every check is. ``status`` is ``ok``, ``degraded`` when only ``DEGRADING``
    checks fail (it works, but an alert reached no one), or ``unhealthy``.
    ``scope="web"`` checks only what a web process needs itself (the database and its
    migrations), for a load balancer: a worker down or a mail backlog must not take
    every web server out of its pool."""
    try:
        checks = {"database": {"ok": True}, "migrations": _migrations()}
        if scope == "all" and checks["migrations"]["ok"]:
            checks |= _workers_and_deliveries() | {"open_alerts": _open_alerts()}
            checks["lanes"] = _lanes()
            checks["pauses"] = _pauses()
            checks["workspace"] = _workspace()
    except DatabaseError:
        checks = {"database": {"ok": False}}
    failing = {name for name, check in checks.items() if not check["ok"]}
    degrading = {name for name in DEGRADING if not checks.get(name, {}).get("no_worker_writes")}
    status = "ok" if not failing else "degraded" if failing <= degrading else "unhealthy"
    return {"ok": not failing, "status": status, "version": VERSION, "checks": checks}


def _migrations() -> dict:
    executor = MigrationExecutor(connection)
    unapplied = len(executor.migration_plan(executor.loader.graph.leaf_nodes()))
    return {"ok": unapplied == 0, "unapplied": unapplied}


def _workers_and_deliveries() -> dict:
    seen = WorkerHeartbeat.objects.aggregate(last=Max("seen_at"))["last"]
    ago = round((db_now() - seen).total_seconds()) if seen else None
    pending = AlertDelivery.objects.filter(status=AlertDelivery.Status.PENDING).count()
    return {
        "workers": {
            "ok": ago is not None and ago <= settings.OVERSIGHT_HEALTH_WORKER_SECONDS,
            "last_seen_seconds_ago": ago,
        },
        "alert_deliveries": {
            "ok": pending <= settings.OVERSIGHT_HEALTH_DELIVERY_BACKLOG,
            "pending": pending,
        },
    }


def _workspace() -> dict:
    """Live workers whose workspace is not file.write's shared one, so that they run
    none (``runs.shared_workspace``): degraded while others still do, unhealthy once
    none does (``no_worker_writes``). How many only: their log says which and why."""
    fresh = db_now() - timedelta(seconds=settings.OVERSIGHT_HEALTH_WORKER_SECONDS)
    live = WorkerHeartbeat.objects.filter(seen_at__gte=fresh)
    refusing = live.exclude(workspace_refused="").count()
    return {
        "ok": refusing == 0,
        "workers_refusing_file_write": refusing,
        "no_worker_writes": refusing > 0 and refusing == live.count(),
    }


def _open_alerts() -> dict:
    """Unresolved alerts that reached no one outside Oversight: an email or webhook
    delivery has failed, and none succeeded. One just raised, not tried yet, is not
    counted: the workers' backlog check covers deliveries that are not being tried."""
    sent = AlertDelivery.objects.filter(alert=OuterRef("pk")).exclude(
        channel=AlertDelivery.Channel.IN_APP
    )
    undelivered = (
        Alert.objects.unresolved()
        .filter(Exists(sent.exclude(last_error="")))
        .exclude(Exists(sent.filter(status=AlertDelivery.Status.DELIVERED)))
        .count()
    )
    return {"ok": undelivered == 0, "undelivered": undelivered}


def _lanes() -> dict:
    """How many lanes live workers paused, always ok: a target that stopped answering is
    its owner's outage, not Oversight's. The workers carry on with every other lane, try
    the paused one again on their own, and its operations say so on their pages; failing
    here would page Oversight's operators for someone else's server. Not which lanes:
    they name hosts (``/metrics``, behind its token, does)."""
    return {"ok": True, "paused": len({pause.lane for pause in paused_lanes()})}


def _pauses() -> dict:
    """What operators paused (``WorkerPause``): failing (degraded) while every lane is,
    since then nothing approved is carried out and approvals lapse, and a hold left in
    place by mistake (after a restore) must reach a monitor. A pause of one lane is ok,
    as a breaker's is: the rest goes on. Counts only, no reasons or lanes (it answers
    anyone). The web scope does not read it: the web works on while workers hold."""
    lanes = [pause.lane for pause in operator_pauses()]
    every_lane = WorkerPause.EVERY_LANE in lanes
    return {"ok": not every_lane, "every_lane": every_lane, "lanes": len(lanes) - every_lane}
