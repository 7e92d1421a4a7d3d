"""A project's admins manage its webhooks on a page (#36 item 2): add an endpoint (its
secret shown once, and it signs what is sent), pause and resume it, give it a new
secret, and read the delivery log, where a failed delivery is sent again."""

import json
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.clock import db_now
from runs.engine import webhooks as sending
from runs.engine.webhooks import deliver_webhooks
from runs.models import WebhookDelivery, WebhookEndpoint
from tests.webhook_receivers import endpoint, signature_of

FAILED, PENDING, DELIVERED = "failed", "pending", "delivered"


def page_url(project) -> str:
    return f"/projects/{project.slug}/webhooks/"


def shown_secret(response) -> str:
    return re.search(r'id="new-token" class="code" value="([0-9a-f]+)"', response.text).group(1)


def log_rows(page: str) -> list[str]:
    """The delivery log's rows, as text without tags or extra spaces."""
    table = page.split('class="deliveries"')[1].split("</table>")[0]
    rows = re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>")[1], re.S)
    return [" ".join(re.sub(r"<[^>]+>", " ", row).split()) for row in rows]


def about(row: str) -> int:
    """The operation a log row is about."""
    return int(re.search(r"operation (\d+)", row).group(1))


def test_an_admin_adds_an_endpoint_whose_secret_shown_once_signs_its_deliveries(
    client, admin_user, project, propose, receiver
):
    client.force_login(admin_user)
    url = f"{receiver.url}?key=receivers-own-secret"

    response = client.post(
        page_url(project), {"name": "Teams bot", "url": url, "events": ["operation.waiting"]}
    )

    assert response.status_code == 200
    secret = shown_secret(response)
    hook = WebhookEndpoint.objects.get(project=project)
    assert (hook.name, hook.url, hook.events) == ("Teams bot", url, ["operation.waiting"])
    propose("call-1")
    assert deliver_webhooks() == 1
    [(headers, body, _at)] = receiver.posts
    assert headers["Oversight-Signature"] == signature_of(secret, headers, body)
    again = client.get(page_url(project)).text
    assert secret not in again
    assert "receivers-own-secret" not in again and "/hooks/oversight" not in again
    assert f"<code>http://127.0.0.1:{receiver.server_address[1]}/…</code>" in again


@pytest.mark.parametrize(
    ("fields", "field", "problem"),
    [
        ({"url": "ftp://files.example.com/in"}, "url", "must be an http(s) URL"),
        ({"url": "https://bot:pw@hooks.example.com/"}, "url", "no user or password"),
        ({"events": []}, "events", "This field is required."),
        ({"events": ["operation.done"]}, "events", "Select a valid choice."),
        ({"name": ""}, "name", "This field is required."),
    ],
)
def test_a_wrong_endpoint_is_refused_with_the_field_s_reason_and_nothing_is_added(
    client, admin_user, project, fields, field, problem
):
    client.force_login(admin_user)
    good = {"name": "Teams bot", "url": "https://hooks.example.com/in", "events": ["decided"]}

    response = client.post(page_url(project), good | fields)

    assert response.status_code == 400
    said = re.search(rf'id="id_{field}_error" role="alert">([^<]*)<', response.text).group(1)
    assert problem in said
    assert not WebhookEndpoint.objects.exists()
    assert 'id="new-token"' not in response.text


def test_the_same_name_twice_is_a_form_error(client, admin_user, project):
    client.force_login(admin_user)
    fields = {"name": "Teams bot", "url": "https://hooks.example.com/in", "events": ["decided"]}
    client.post(page_url(project), fields)

    response = client.post(page_url(project), fields)

    assert response.status_code == 400
    assert "already exists" in response.text
    assert WebhookEndpoint.objects.count() == 1


@pytest.mark.parametrize("who", ["reviewer", "auditor", "owner"])
def test_only_the_project_s_admins_reach_the_page(client, request, project, who):
    client.force_login(request.getfixturevalue(who))
    hook = endpoint(project, "https://hooks.example.com/in")

    assert client.get(page_url(project)).status_code == 403
    assert client.post(f"{page_url(project)}{hook.pk}/state/", {"active": "off"}).status_code == 403
    assert WebhookEndpoint.objects.get().active


def test_another_project_s_endpoints_and_deliveries_are_not_found(
    client, admin_user, project, other_project, propose
):
    theirs = endpoint(other_project, "https://hooks.example.com/in")
    mine = endpoint(project, "https://hooks.example.com/in")
    propose("call-1")
    delivery = mine.deliveries.get()
    WebhookDelivery.objects.filter(pk=delivery.pk).update(status=FAILED)
    client.force_login(admin_user)

    assert client.get(page_url(other_project)).status_code == 404
    state = client.post(f"{page_url(project)}{theirs.pk}/state/", {"active": "off"})
    assert state.status_code == 404
    secret = client.post(f"{page_url(project)}{theirs.pk}/secret/", {"name": theirs.name})
    assert secret.status_code == 404
    other = client.post(f"{page_url(other_project)}deliveries/{delivery.pk}/send-again/")
    assert other.status_code == 404
    assert WebhookEndpoint.objects.get(pk=theirs.pk).active
    assert WebhookEndpoint.objects.get(pk=theirs.pk).salt == theirs.salt


def test_a_paused_endpoint_hears_of_nothing_until_it_is_resumed(
    client, admin_user, project, propose, receiver
):
    hook = endpoint(project, receiver.url, ["operation.waiting"])
    client.force_login(admin_user)

    paused = client.post(f"{page_url(project)}{hook.pk}/state/", {"active": "off"}, follow=True)
    propose("call-1")
    assert "Paused" in paused.text and deliver_webhooks() == 0
    resumed = client.post(f"{page_url(project)}{hook.pk}/state/", {"active": "on"}, follow=True)
    propose("call-2")

    assert "Teams bot is sent its events again." in resumed.text
    assert deliver_webhooks() == 1
    [(_headers, body, _at)] = receiver.posts
    assert json.loads(body)["data"]["id"] == hook.deliveries.get().event.data["id"]


def test_a_new_secret_is_shown_once_and_signs_from_then_on(
    client, admin_user, project, propose, receiver
):
    hook = endpoint(project, receiver.url, ["operation.waiting"])
    client.force_login(admin_user)

    renamed = client.post(f"{page_url(project)}{hook.pk}/secret/", {"name": "Old name"})
    unchanged = WebhookEndpoint.objects.get().salt
    response = client.post(f"{page_url(project)}{hook.pk}/secret/", {"name": "Teams bot"})

    assert renamed.status_code == 302 and unchanged == hook.salt  # Refused: no change.
    secret = shown_secret(response)
    assert secret != hook.shown
    propose("call-1")
    deliver_webhooks()
    [(headers, body, _at)] = receiver.posts
    assert headers["Oversight-Signature"] == signature_of(secret, headers, body)
    assert headers["Oversight-Signature"] != signature_of(hook.shown, headers, body)


def test_the_log_shows_each_delivery_and_a_failed_one_is_sent_again_until_delivered(
    client, admin_user, project, propose, receiver
):
    hook = endpoint(project, receiver.url, ["operation.waiting"])
    receiver.answer = lambda number, _headers, _body: 503 if number <= 8 else 204
    first = propose("call-1")
    later = db_now() + timedelta(days=2)
    for _attempt in range(sending.MAX_ATTEMPTS):
        deliver_webhooks(later)
    delivery = hook.deliveries.get()
    client.force_login(admin_user)

    [row] = log_rows(client.get(page_url(project)).text)
    assert row.startswith("operation.waiting")
    assert f"operation {first.pk} Teams bot Failed" in row
    assert f"8 HTTP 503 attempt 8: the receiver answered 503 {delivery.delivery_id}" in row

    sent_again = client.post(
        f"{page_url(project)}deliveries/{delivery.pk}/send-again/", follow=True
    )
    assert f"Delivery {delivery.delivery_id} will be sent again at once." in sent_again.text
    assert deliver_webhooks() == 1
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.last_status) == (DELIVERED, 1, 204)
    assert len({headers["Oversight-Delivery"] for headers, _, _ in receiver.posts}) == 1

    refused = client.post(f"{page_url(project)}deliveries/{delivery.pk}/send-again/", follow=True)
    assert "has not failed" in refused.text
    assert WebhookDelivery.objects.get().status == DELIVERED


def test_the_failed_only_log_leaves_out_the_rest(client, admin_user, project, propose):
    hook = endpoint(project, "https://hooks.example.com/in", ["operation.waiting"])
    operations = [propose(f"call-{n}") for n in range(3)]
    hook.deliveries.filter(event__data__id=operations[1].pk).update(status=FAILED)
    client.force_login(admin_user)

    everything = log_rows(client.get(page_url(project)).text)
    failed = log_rows(client.get(f"{page_url(project)}?status=failed").text)

    assert [about(row) for row in everything] == [op.pk for op in reversed(operations)]
    assert [about(row) for row in failed] == [operations[1].pk]


@pytest.mark.parametrize("deliveries", [2, 40])
def test_the_page_reads_a_fixed_number_of_queries_however_long_the_log(
    client, admin_user, project, propose, deliveries
):
    for name in ("Teams bot", "Pager"):
        endpoint(project, "https://hooks.example.com/in", name=name)
    for n in range(deliveries // 2):
        propose(f"call-{n}")
    client.force_login(admin_user)

    with CaptureQueriesContext(connection) as queries:
        page = client.get(page_url(project)).text

    assert len(log_rows(page)) == deliveries
    assert len(queries) == 12
