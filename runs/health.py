"""What ``/healthz`` answers a load balancer or a monitor: whether the database is
reachable, its migrations applied, a worker alive (its heartbeat fresh) and the alert
deliveries keeping up. Counts and ages only: no data."""

from django.conf import settings
from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.db.models import Max

from runs.clock import db_now
from runs.models import AlertDelivery, WorkerHeartbeat


def health() -> dict:
    """``{"ok": …, "checks": {name: {"ok": …, …}}}``; ``ok`` only if every check is."""
    try:
        checks = {"database": {"ok": True}, **_checks()}
    except DatabaseError:
        checks = {"database": {"ok": False}}
    return {"ok": all(check["ok"] for check in checks.values()), "checks": checks}


def _checks() -> dict:
    executor = MigrationExecutor(connection)
    unapplied = len(executor.migration_plan(executor.loader.graph.leaf_nodes()))
    seen = WorkerHeartbeat.objects.aggregate(last=Max("seen_at"))["last"]
    ago = round((db_now() - seen).total_seconds()) if seen else None
    pending = AlertDelivery.objects.filter(status=AlertDelivery.Status.PENDING).count()
    return {
        "migrations": {"ok": unapplied == 0, "unapplied": unapplied},
        "workers": {
            "ok": ago is not None and ago <= settings.OVERSIGHT_HEALTH_WORKER_SECONDS,
            "last_seen_seconds_ago": ago,
        },
        "alert_deliveries": {
            "ok": pending <= settings.OVERSIGHT_HEALTH_DELIVERY_BACKLOG,
            "pending": pending,
        },
    }
