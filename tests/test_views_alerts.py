import html
import re

import pytest
from django.test import Client

from runs.engine.worker import Worker
from runs.models import Alert, Run


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


@pytest.mark.parametrize("action", ["acknowledge", "resolve"])
@pytest.mark.parametrize(("role", "status"), [("reviewer", 403), ("outsider", 404)])
def test_alert_actions_without_the_role_are_refused(client, request, alert, action, role, status):
    client.force_login(request.getfixturevalue(role))
    response = client.post(f"/alerts/{alert.pk}/{action}/", {"note": "Fixed by hand."})
    assert response.status_code == status
    alert.refresh_from_db()
    assert alert.status == Alert.Status.OPEN


@pytest.mark.parametrize("action", ["acknowledge", "resolve"])
def test_alert_actions_wrong_method_is_refused(as_admin, alert, action):
    assert as_admin.get(f"/alerts/{alert.pk}/{action}/").status_code == 405


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
