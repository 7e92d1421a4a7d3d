"""``/healthz``, for load balancers and monitors: no sign-in, no data; 200 when the
database answers, its migrations are applied, a worker's heartbeat is fresh and the
alert deliveries keep up; else 503, naming the check that failed."""

from datetime import timedelta

import pytest
from django.db import connection

from runs.engine.worker import Worker
from runs.models import Alert, AlertDelivery, WorkerHeartbeat
from tests.processes import free_port

pytestmark = pytest.mark.django_db


def test_healthy_once_a_worker_has_worked(client):
    Worker("health-worker").housekeeping()
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is True
    assert body["checks"]["database"] == {"ok": True}
    assert body["checks"]["migrations"] == {"ok": True, "unapplied": 0}
    assert body["checks"]["workers"]["ok"] is True
    assert 0 <= body["checks"]["workers"]["last_seen_seconds_ago"] <= 5
    assert body["checks"]["alert_deliveries"] == {"ok": True, "pending": 0}
    assert WorkerHeartbeat.objects.get().name == "health-worker"


def test_no_worker_alive_is_unhealthy(client, settings):
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["checks"]["workers"] == {"ok": False, "last_seen_seconds_ago": None}
    Worker("old-worker").housekeeping()
    WorkerHeartbeat.objects.update(
        seen_at=WorkerHeartbeat.objects.get().seen_at - timedelta(hours=1)
    )
    stale = client.get("/healthz").json()["checks"]["workers"]
    assert stale["ok"] is False and stale["last_seen_seconds_ago"] >= 3600


def test_the_load_balancer_s_scope_needs_no_worker_and_no_probe_logs_an_error(client, caplog):
    assert client.get("/healthz").status_code == 503
    web = client.get("/healthz?scope=web")
    assert web.status_code == 200
    assert web.json() == {
        "ok": True,
        "checks": {"database": {"ok": True}, "migrations": {"ok": True, "unapplied": 0}},
    }
    assert client.head("/healthz?scope=web").status_code == 200
    assert not [r for r in caplog.records if r.name == "django.request"]


def test_a_delivery_backlog_is_unhealthy(client, settings, run):
    settings.OVERSIGHT_HEALTH_DELIVERY_BACKLOG = 1
    Worker("health-worker").housekeeping()
    alert = Alert.objects.create(project=run.project, run=run, summary="checked")
    for n in range(2):
        AlertDelivery.objects.create(alert=alert, channel="email", target=f"ops{n}@example.com")
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["checks"]["alert_deliveries"] == {"ok": False, "pending": 2}


def test_the_database_out_of_reach_is_unhealthy(client):
    """SQLite's file moved away, or PostgreSQL's server gone (nothing listens where it
    was): the check fails, the answer still comes."""
    Worker("health-worker").housekeeping()
    gone = (
        {"NAME": "/nonexistent/folder/oversight.sqlite3"}
        if connection.vendor == "sqlite"
        else {"HOST": "127.0.0.1", "PORT": str(free_port())}
    )
    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict.update(gone)
    try:
        response = client.get("/healthz")
    finally:
        connection.close()
        connection.settings_dict.update(saved)
    assert response.status_code == 503
    assert response.json() == {"ok": False, "checks": {"database": {"ok": False}}}
