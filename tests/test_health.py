"""``/healthz``, for load balancers and monitors: no sign-in, no data; 200 when the
database answers, its migrations are applied, a worker's heartbeat is fresh, the alert
deliveries keep up and every open alert reached someone; else 503, naming the check that
failed, and degraded rather than unhealthy when only an alert's deliveries failed."""

from datetime import timedelta

import pytest
from django.db import connection

from oversight.version import VERSION
from runs.actors import Actor
from runs.clock import db_now
from runs.engine.deliveries import deliver_due
from runs.engine.worker import Worker
from runs.models import Alert, AlertDelivery, WorkerHeartbeat
from runs.services.alerts import acknowledge_alert, resolve_alert
from runs.services.pauses import pause_workers

pytest_plugins = ["tests.ports"]

pytestmark = pytest.mark.django_db


def test_healthy_once_a_worker_has_worked(client):
    Worker("health-worker").housekeeping()
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert (body["ok"], body["status"]) == (True, "ok")
    assert body["checks"]["database"] == {"ok": True}
    assert body["checks"]["migrations"] == {"ok": True, "unapplied": 0}
    assert body["checks"]["workers"]["ok"] is True
    assert 0 <= body["checks"]["workers"]["last_seen_seconds_ago"] <= 5
    assert body["checks"]["alert_deliveries"] == {"ok": True, "pending": 0}
    assert body["checks"]["open_alerts"] == {"ok": True, "undelivered": 0}
    assert WorkerHeartbeat.objects.get().name == "health-worker"


def test_no_worker_alive_is_unhealthy(client, settings):
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["status"] == "unhealthy"
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
        "status": "ok",
        "version": VERSION,
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


def test_the_database_out_of_reach_is_unhealthy(client, refused_port):
    """SQLite's file moved away, or PostgreSQL's server gone (nothing listens where it
    was): the check fails, the answer still comes."""
    Worker("health-worker").housekeeping()
    gone = (
        {"NAME": "/nonexistent/folder/oversight.sqlite3"}
        if connection.vendor == "sqlite"
        else {"HOST": "127.0.0.1", "PORT": str(refused_port)}
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
    assert response.json() == {
        "ok": False,
        "status": "unhealthy",
        "version": VERSION,
        "checks": {"database": {"ok": False}},
    }


SMTP = "django.core.mail.backends.smtp.EmailBackend"


@pytest.fixture
def nobody_listens(refused_port) -> str:
    """A webhook where nobody listens."""
    return f"http://127.0.0.1:{refused_port}/hook"


def alert_with(run, *deliveries: tuple[str, str]) -> Alert:
    """An open alert, delivered in-app, and due on each (channel, target) given."""
    alert = Alert.objects.create(project=run.project, run=run, summary="Reconcile the ledger")
    alert.deliveries.create(channel="in_app", target="alerts page", status="delivered")
    for channel, target in deliveries:
        alert.deliveries.create(channel=channel, target=target, next_attempt_at=db_now())
    return alert


def test_an_open_alert_no_delivery_reached_is_degraded(
    client, run, settings, admin_user, refused_port, nobody_listens
):
    settings.MAILERS = {
        "default": {"BACKEND": SMTP, "OPTIONS": {"host": "127.0.0.1", "port": refused_port}}
    }
    Worker("health-worker").housekeeping()
    alert = alert_with(run, ("webhook", nobody_listens), ("email", "ops@example.com"))
    assert client.get("/healthz").status_code == 200  # Not tried yet: nothing failed.

    assert deliver_due() == 2  # Nobody listens at either: both fail.

    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert (body["ok"], body["status"]) == (False, "degraded")
    assert body["checks"]["open_alerts"] == {"ok": False, "undelivered": 1}
    assert body["checks"]["workers"]["ok"] is True
    acknowledge_alert(alert=alert, user=admin_user)
    assert client.get("/healthz").json()["status"] == "degraded"  # Still reached no one.
    resolve_alert(alert=alert, user=admin_user, note="Told the team by phone.")
    assert client.get("/healthz").json()["status"] == "ok"


def test_one_delivery_made_is_enough_and_an_alert_without_channels_is_no_news(
    client, run, nobody_listens
):
    Worker("health-worker").housekeeping()
    alert_with(run)  # Only in-app: no admin with an email, no webhook.
    alert = alert_with(run, ("webhook", nobody_listens))
    alert.deliveries.create(channel="email", target="ops@example.com", next_attempt_at=db_now())

    assert deliver_due() == 2  # The email goes out; the webhook is refused.

    assert alert.deliveries.get(channel="email").status == AlertDelivery.Status.DELIVERED
    assert alert.deliveries.get(channel="webhook").last_error
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json()["checks"]["open_alerts"] == {"ok": True, "undelivered": 0}


def test_degraded_and_down_together_is_unhealthy(client, run, nobody_listens):
    alert_with(run, ("webhook", nobody_listens))
    deliver_due()

    body = client.get("/healthz").json()

    assert body["status"] == "unhealthy"  # No worker alive: more than degraded.
    assert body["checks"]["open_alerts"]["ok"] is False


def test_every_lane_paused_by_an_operator_is_degraded_for_monitors_not_for_the_web(client, propose):
    Worker("health-worker").housekeeping()
    propose("pay-1")  # A transfer: an operation in the lane "database".
    pause_workers(lane="database", actor=Actor.policy("drill"), reason="Fix the example.com")
    one_lane = client.get("/healthz").json()["checks"]["pauses"]
    pause_workers(actor=Actor.policy("drill"), reason="Secret maintenance details")

    held = client.get("/healthz")

    assert one_lane == {"ok": True, "every_lane": False, "lanes": 1}
    assert held.status_code == 503
    assert held.json()["status"] == "degraded"
    assert held.json()["checks"]["pauses"] == {"ok": False, "every_lane": True, "lanes": 1}
    assert b"Secret" not in held.content and b"example.com" not in held.content
    assert client.get("/healthz?scope=web").status_code == 200
