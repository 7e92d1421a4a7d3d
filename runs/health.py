"""What ``/healthz`` answers a load balancer or a monitor: whether the database is
reachable, its migrations applied, a worker alive (its heartbeat fresh) and the alert
deliveries keeping up. Counts and ages only: no data."""

from django.conf import settings
from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.db.models import Max

from runs.clock import db_now
from runs.models import AlertDelivery, WorkerHeartbeat


def health(*, scope: str = "all") -> dict:
    """``{"ok": …, "checks": {name: {"ok": …, …}}}``; ``ok`` only if every check is.
    ``scope="web"`` checks only what a web process needs itself (the database and its
    migrations), for a load balancer: a worker down or a mail backlog must not take every
    web server out of its pool."""
    try:
        checks = {"database": {"ok": True}, "migrations": _migrations()}
        if scope == "all" and checks["migrations"]["ok"]:
            checks |= _workers_and_deliveries()
    except DatabaseError:
        checks = {"database": {"ok": False}}
    return {"ok": all(check["ok"] for check in checks.values()), "checks": checks}


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
