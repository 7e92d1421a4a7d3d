import html
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.test import Client

from runs.clock import db_now
from runs.engine.deliveries import deliver_due
from runs.engine.worker import Worker
from runs.models import Alert, AlertDelivery, Checkpoint, Run

pytest_plugins = ["tests.ports"]


def nav_alerts(page: str) -> int:
    return int(re.search(r'id="nav-alerts"[^>]*>(\d+)<', page)[1])


@pytest.fixture
def alert(approved, admin_user) -> Alert:
    """A verification the target lies about, with no undo: the engine raises an alert
    (and emails the project's admin)."""
    op = approved("http-rigged-no-undo")
    Worker().drain()
    return Alert.objects.get(operation=op)


@pytest.fixture
def webhook_socket(settings, refusing_socket) -> socket.socket:
    """The alerts' webhook, on a port where nobody listens yet: each attempt is refused.
    The receiver listens on that socket at last (``webhook_back``)."""
    port = refusing_socket.getsockname()[1]
    settings.OVERSIGHT_ALERT_WEBHOOK_URL = f"http://127.0.0.1:{port}/hook"
    return refusing_socket


@pytest.fixture
def undelivered(webhook_socket, approved, admin_user) -> Alert:
    """An alert emailed to the admin, whose webhook was refused."""
    op = approved("http-rigged-no-undo")
    Worker().drain()
    return Alert.objects.get(operation=op)


class Hook(BaseHTTPRequestHandler):
    def log_message(self, format, *args) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.server.posts += 1
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def webhook_back(webhook_socket):
    """The webhook's receiver, listening at last."""
    server = ThreadingHTTPServer(webhook_socket.getsockname(), Hook, bind_and_activate=False)
    server.socket.close()
    server.socket = webhook_socket
    server.server_activate()
    server.posts = 0
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def as_admin(client, admin_user) -> Client:
    client.force_login(admin_user)
    return client


def test_alert_is_listed_with_what_failed_and_who_was_notified(client, reviewer, alert):
    client.force_login(reviewer)

    page = client.get("/alerts/").text

    assert f'id="alert-{alert.pk}"' in page
    assert html.escape(alert.summary) in page
    assert "State left for investigation" in page
    assert alert.state_left["arguments"]["url"] in page
    assert 'in-app to alerts page: <strong class="delivery-delivered">Delivered</strong>' in page
    assert 'Email to admin@example.com: <strong class="delivery-delivered">' in page
    assert nav_alerts(page) == 1
    assert "<title>(1) Alerts · Oversight</title>" in page


def test_reviewer_is_not_offered_the_alert_actions(client, reviewer, alert):
    client.force_login(reviewer)
    page = client.get("/alerts/").text
    assert f"/alerts/{alert.pk}/acknowledge/" not in page
    assert f"/alerts/{alert.pk}/resolve/" not in page


def test_reviewer_is_not_offered_to_send_again(client, reviewer, undelivered):
    client.force_login(reviewer)
    page = client.get("/alerts/").text
    assert 'class="delivery-pending"' in page
    assert f"/alerts/{undelivered.pk}/send-again/" not in page


def test_admin_acknowledges_an_alert(as_admin, alert):
    response = as_admin.post(f"/alerts/{alert.pk}/acknowledge/")

    assert response.status_code == 302
    assert response["Location"] == "/alerts/"
    alert.refresh_from_db()
    assert alert.status == Alert.Status.ACKNOWLEDGED
    page = as_admin.get("/alerts/").text
    assert f"Alert {alert.pk} acknowledged." in page
    assert "acknowledged by admin" in page
    assert f"/alerts/{alert.pk}/acknowledge/" not in page


ACTIONS = ["acknowledge", "resolve", "send-again"]
# The session and its user, their preferences, the navigation's counts, the projects one
# may see and act in, the alerts and their deliveries: as many for one alert as for 30.
QUERIES = 11


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize(("role", "status"), [("reviewer", 403), ("outsider", 404)])
def test_alert_actions_without_the_role_are_refused(
    client, request, undelivered, action, role, status
):
    before = list(AlertDelivery.objects.values_list("pk", "status", "next_attempt_at"))
    client.force_login(request.getfixturevalue(role))
    response = client.post(f"/alerts/{undelivered.pk}/{action}/", {"note": "Fixed by hand."})
    assert response.status_code == status
    undelivered.refresh_from_db()
    assert undelivered.status == Alert.Status.OPEN
    assert list(AlertDelivery.objects.values_list("pk", "status", "next_attempt_at")) == before


@pytest.mark.parametrize("action", ACTIONS)
def test_alert_actions_wrong_method_is_refused(as_admin, undelivered, action):
    assert as_admin.get(f"/alerts/{undelivered.pk}/{action}/").status_code == 405


def test_resolve_without_a_note_is_refused_with_a_message(as_admin, alert):
    response = as_admin.post(f"/alerts/{alert.pk}/resolve/", {"note": " "}, follow=True)

    assert response.redirect_chain == [("/alerts/", 302)]
    assert f"Alert {alert.pk}: a resolution note is required." in response.text
    alert.refresh_from_db()
    assert alert.status == Alert.Status.OPEN


def test_resolve_with_a_note_closes_the_alert_and_releases_the_run(as_admin, alert):
    response = as_admin.post(
        f"/alerts/{alert.pk}/resolve/", {"note": "Set the colour by hand."}, follow=True
    )

    assert f"Alert {alert.pk} resolved; its run is released." in response.text
    assert f'id="alert-{alert.pk}"' not in response.text
    assert "No open alerts." in response.text
    assert nav_alerts(response.text) == 0
    alert.refresh_from_db()
    assert (alert.status, alert.resolution_note) == ("resolved", "Set the colour by hand.")
    alert.run.refresh_from_db()
    assert (alert.run.status, alert.run.reason) == (Run.Status.QUEUED, "")


# --- Deliveries: their state, and sending again ----------------------------------------


def delivery_line(page: str, channel: str) -> str:
    return re.search(rf"<li id=\"delivery-\d+\">{channel} to .*?</li>", page)[0]


def test_a_delivery_being_retried_shows_why_and_its_next_try(as_admin, undelivered):
    page = as_admin.get("/alerts/").text

    assert delivery_line(page, "Email").endswith(
        '<strong class="delivery-delivered">Delivered</strong> after 1 attempt</li>'
    )
    webhook = delivery_line(page, "Webhook")
    assert '<strong class="delivery-pending">Pending</strong> after 1 attempt' in webhook
    assert "— attempt 1: the target refused the connection · next try <time datetime=" in webhook
    assert f"/alerts/{undelivered.pk}/send-again/" in page


def test_a_delivery_given_up_says_so(as_admin, settings, webhook_socket, approved, admin_user):
    settings.OVERSIGHT_ALERT_MAX_ATTEMPTS = 1
    approved("http-rigged-no-undo")
    Worker().drain()

    webhook = delivery_line(as_admin.get("/alerts/").text, "Webhook")

    assert '<strong class="delivery-failed">Failed</strong> after 1 attempt' in webhook
    assert webhook.endswith("— attempt 1: the target refused the connection · no more tries</li>")


@pytest.mark.parametrize("given_up", [False, True])
def test_admin_sends_again_what_was_not_delivered_and_it_goes_out_at_once(
    as_admin, undelivered, webhook_back, admin_user, given_up
):
    webhook = undelivered.deliveries.get(channel="webhook")
    if given_up:
        AlertDelivery.objects.filter(pk=webhook.pk).update(status="failed", next_attempt_at=None)
    assert deliver_due() == 0  # Its next try (if any) is seconds away.
    before = db_now()

    response = as_admin.post(f"/alerts/{undelivered.pk}/send-again/", follow=True)

    assert response.redirect_chain == [("/alerts/", 302)]
    assert f"Alert {undelivered.pk}: 1 delivery will be sent again at once." in response.text
    asked = Checkpoint.objects.get(event="alert.send_again")
    assert (asked.actor_user, asked.run_id) == (admin_user, undelivered.run_id)
    assert asked.state["alert"] == undelivered.pk
    webhook.refresh_from_db()
    assert webhook.retrying_since >= before  # Another day of retries if it fails again.
    assert deliver_due() == 1  # Due at once, in the database's clock.
    webhook.refresh_from_db()
    assert (webhook.status, webhook.attempts, webhook_back.posts) == ("delivered", 2, 1)
    page = as_admin.get("/alerts/").text
    assert f"/alerts/{undelivered.pk}/send-again/" not in page


def test_sending_again_what_reached_everyone_is_refused_with_a_message(as_admin, alert):
    response = as_admin.post(f"/alerts/{alert.pk}/send-again/", follow=True)

    assert f"alert {alert.pk} has reached every recipient: nothing to send again" in response.text
    assert not Checkpoint.objects.filter(event="alert.send_again").exists()


def many_alerts(run, count: int) -> None:
    """Alerts each delivered in-app, with an email given up and a webhook being retried."""
    for n in range(count):
        alert = Alert.objects.create(project=run.project, run=run, summary=f"Alert {n}")
        for channel, status in [
            ("in_app", "delivered"),
            ("email", "failed"),
            ("webhook", "pending"),
        ]:
            alert.deliveries.create(
                channel=channel,
                target=f"{channel}-{n}",
                status=status,
                next_attempt_at=db_now(),
                attempts=3,
                last_error="attempt 3: the target refused the connection",
            )


@pytest.mark.parametrize("count", [1, 30])
def test_the_alerts_page_asks_the_same_queries_for_any_number_of_alerts(
    as_admin, run, count, django_assert_max_num_queries
):
    many_alerts(run, count)
    with django_assert_max_num_queries(QUERIES):
        page = as_admin.get("/alerts/").text
    assert page.count('class="delivery-failed"') == count
    assert page.count("/send-again/") == count
