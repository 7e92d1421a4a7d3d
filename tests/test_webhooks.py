"""Signed webhooks per project (#36): each event is recorded where its change happens,
and only then; the notification lane POSTs it to a real receiver on loopback, signed
with the endpoint's secret (which the database does not hold), the same id on every
attempt; a failed attempt is tried again later; a receiver that hangs is cut at the
deadline and delays no other endpoint; an internal address is refused unless allowed.
A receiver written from the docs verifies a delivery and refuses a tampered body."""

import json
import re
import threading
import time
import urllib.error
import urllib.request
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command

from runs.clock import db_now
from runs.engine import webhooks as sending
from runs.engine.webhooks import deliver_webhooks
from runs.engine.worker import Worker
from runs.models import ApprovalPolicy, Decision, WebhookDelivery, WebhookEndpoint, WebhookEvent
from runs.services.alerts import raise_alert
from runs.services.proposals import propose_operation
from runs.services.requests import answer, ask
from runs.transitions import transition_operation
from tests.conftest import AGENT
from tests.documentation import page
from tests.helpers import decide_on
from tests.webhook_receivers import endpoint, signature_of

ALL = list(WebhookEvent.Kind)
Status = WebhookDelivery.Status
DELIVERED, PENDING, FAILED = Status.DELIVERED, Status.PENDING, Status.FAILED


def kinds(hook: WebhookEndpoint) -> list[str]:
    return list(hook.deliveries.order_by("pk").values_list("event__kind", flat=True))


def test_a_proposal_that_waits_reaches_the_receiver_signed_with_the_endpoints_secret(
    project, propose, receiver, settings
):
    hook = endpoint(project, receiver.url, ["operation.waiting"])
    operation = propose("call-1", arguments={"from": "A", "to": "B", "amount": "1250.00"})

    assert deliver_webhooks() == 1

    [(headers, body, _at)] = receiver.posts
    assert headers["Oversight-Signature"] == signature_of(hook.shown, headers, body)
    assert abs(int(headers["Oversight-Timestamp"]) - time.time()) < 60
    sent = json.loads(body)
    delivery = hook.deliveries.get()
    assert sent["id"] == headers["Oversight-Delivery"] == str(delivery.delivery_id)
    assert (sent["event"], headers["Oversight-Event"], sent["project"]) == (
        "operation.waiting",
        "operation.waiting",
        "acme",
    )
    assert sent["data"] == {
        "item": "operation",
        "id": operation.pk,
        "gist": "A → B: 1,250.00",
        "action": "ledger.transfer",
        "summary": "",
        "risk": "medium",
        "required_approvals": 1,
        "deadline": operation.expires_at.isoformat(),
        "run": operation.run_id,
        "agent": "test-agent",
        "goal": "Pay the supplier invoice",
        "link": f"{settings.OVERSIGHT_BASE_URL}/operations/{operation.pk}/",
    }
    assert (delivery.status, delivery.last_status, delivery.attempts) == (DELIVERED, 200, 1)
    assert deliver_webhooks() == 0  # Delivered once, and that is all.


def test_each_event_is_recorded_where_its_change_happens_for_the_endpoints_that_want_it(
    project, other_project, run, propose, session, agent_token, reviewer, reviewer2, receiver
):
    everything = endpoint(project, receiver.url)
    decisions = endpoint(project, receiver.url, ["decided"], name="Decisions only")
    elsewhere = endpoint(other_project, receiver.url)
    ApprovalPolicy.objects.create(project=project, action="ledger.transfer", approvals_required=0)

    propose("auto", arguments={"from": "A", "to": "B", "amount": "1.00"}, risk="low")
    waiting = propose("waits", action="notes.write", arguments={"note": "hi"}, risk="high")
    decide_on(waiting, reviewer)  # One approval of the two a high risk needs: no decision.
    decide_on(waiting, reviewer2)
    rejected = propose("rejected", action="notes.write", arguments={"note": "no"})
    decide_on(rejected, reviewer, Decision.Kind.REJECT, comment="Not today")
    request, _ = ask(run=run, prompt="Ship it?", actor=AGENT, token=agent_token)
    answer(request=request, reviewer=reviewer, kind="approve", version=request.version)
    for status in ("in_flight", "verify_failed"):
        transition_operation(operation=waiting, to=status, actor=AGENT)
    raise_alert(operation=waiting, actor=AGENT, summary="Verify failed", state_left={})

    assert kinds(everything) == [
        "operation.waiting",
        "decided",
        "operation.waiting",
        "decided",
        "request.waiting",
        "decided",
        "alert.raised",
    ]
    assert kinds(decisions) == ["decided", "decided", "decided"]
    assert kinds(elsewhere) == []
    said = [event.data for event in WebhookEvent.objects.filter(kind="decided").order_by("pk")]
    assert [(data["item"], data["outcome"], data["by"], data["comment"]) for data in said] == [
        ("operation", "approved", "reviewer2", ""),
        ("operation", "rejected", "reviewer", "Not today"),
        ("request", "answered", "reviewer", ""),
    ]


def test_a_change_refused_records_no_event(project, run, propose, receiver):
    hook = endpoint(project, receiver.url)
    propose("first")
    with pytest.raises(Exception, match="read the run again"):
        propose_operation(
            run=run,
            call_id="stale",
            action="notes.write",
            arguments={},
            risk="low",
            rollback_kind="none",
            base_version=1,
            actor=AGENT,
        )
    assert kinds(hook) == ["operation.waiting"]


def test_an_inactive_endpoint_is_sent_nothing(project, propose, receiver):
    hook = endpoint(project, receiver.url)
    WebhookEndpoint.objects.filter(pk=hook.pk).update(active=False)
    propose("call-1")
    assert (kinds(hook), deliver_webhooks(), receiver.posts) == ([], 0, [])


def test_a_failed_attempt_is_tried_again_later_with_the_same_id_and_body(
    project, propose, receiver
):
    hook = endpoint(project, receiver.url, ["operation.waiting"])
    receiver.answer = lambda number, _headers, _body: 500 if number == 1 else 204
    propose("call-1")

    assert deliver_webhooks() == 1
    delivery = hook.deliveries.get()
    assert (delivery.status, delivery.last_status, delivery.attempts) == (PENDING, 500, 1)
    assert delivery.last_error == "attempt 1: the receiver answered 500"
    assert deliver_webhooks() == 0  # Not due for a minute.

    assert deliver_webhooks(db_now() + timedelta(minutes=2)) == 1

    delivery.refresh_from_db()
    assert (delivery.status, delivery.last_status, delivery.attempts) == (DELIVERED, 204, 2)
    (first, body1, _), (second, body2, _) = receiver.posts
    assert first["Oversight-Delivery"] == second["Oversight-Delivery"]
    assert body1 == body2
    assert second["Oversight-Signature"] == signature_of(hook.shown, second, body2)


def test_the_eighth_failed_attempt_is_the_last(project, propose, receiver):
    hook = endpoint(project, receiver.url, ["operation.waiting"])
    receiver.answer = lambda _number, _headers, _body: 503
    propose("call-1")
    waits = []
    for _attempt in range(sending.MAX_ATTEMPTS):
        assert deliver_webhooks(db_now() + timedelta(days=2)) == 1
        delivery = hook.deliveries.get()
        if delivery.next_attempt_at is not None:
            waits.append(round((delivery.next_attempt_at - db_now()).total_seconds() / 60))
    assert waits == [1, 5, 25, 125, 480, 480, 480]
    assert (delivery.status, delivery.attempts, delivery.next_attempt_at) == (FAILED, 8, None)
    assert deliver_webhooks(db_now() + timedelta(days=30)) == 0


def test_a_hanging_receiver_is_cut_at_the_deadline_and_delays_no_other_endpoint(
    project, propose, receivers, settings
):
    settings.OVERSIGHT_HTTP_DEADLINE = 1
    hanging, healthy = receivers(2)
    let_go = threading.Event()

    def hang(_number, _headers, _body) -> int:
        let_go.wait(timeout=10)
        return 200

    hanging.answer = hang
    stuck = endpoint(project, hanging.url, name="Hangs")
    fine = endpoint(project, healthy.url, name="Answers")
    propose("call-1")

    started = time.monotonic()
    try:
        assert deliver_webhooks() == 2
        took = time.monotonic() - started
    finally:
        let_go.set()

    [(_headers, _body, arrived)] = healthy.posts
    [(_headers, _body, held)] = hanging.posts
    assert arrived < held + 0.9  # Sent beside the hanging one, not after its deadline.
    assert took < 3  # Cut at the 1 s deadline.
    assert fine.deliveries.get().status == DELIVERED
    cut = stuck.deliveries.get()
    assert cut.status == PENDING
    assert "did not finish answering within 1 s" in cut.last_error
    assert "hooks/oversight" not in cut.last_error  # The URL may hold a secret.


def test_an_internal_address_is_refused_unless_its_host_and_port_are_allowed(
    project, propose, receiver, settings
):
    settings.OVERSIGHT_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]  # A bare host: public ones only.
    hook = endpoint(project, receiver.url, ["operation.waiting"])
    propose("call-1")

    assert deliver_webhooks() == 1

    delivery = hook.deliveries.get()
    assert receiver.posts == []
    assert "an internal address" in delivery.last_error
    assert (delivery.status, delivery.last_status) == (PENDING, None)


def test_the_secret_is_not_in_the_database(project, receiver):
    hook = endpoint(project, receiver.url)
    dumped = StringIO()
    call_command("dumpdata", stdout=dumped)
    assert re.fullmatch("[0-9a-f]{64}", hook.shown)
    assert hook.shown not in dumped.getvalue()
    assert WebhookEndpoint.objects.get(pk=hook.pk).secret == hook.shown


def test_a_new_secret_signs_from_then_on(project, propose, receiver):
    hook = endpoint(project, receiver.url, ["operation.waiting"])
    old = hook.shown
    new = hook.new_secret()
    hook.save()
    propose("call-1")
    deliver_webhooks()
    [(headers, body, _)] = receiver.posts
    assert new != old
    assert headers["Oversight-Signature"] == signature_of(new, headers, body)


def test_the_workers_notification_round_sends_them(project, propose, receiver):
    hook = endpoint(project, receiver.url, ["operation.waiting"])
    propose("call-1")
    Worker("w").housekeeping()
    assert hook.deliveries.get().status == DELIVERED


# --- the receiver of the docs ---------------------------------------------------------------


def documented_verify():
    """The ``verify`` of docs/operating/webhooks.md, run as the page shows it."""
    text = page("operating/webhooks").split("## Verifying a delivery", 1)[1]
    code = re.search(r"```python\n(.*?)```", text, re.DOTALL).group(1)
    namespace: dict = {}
    exec(compile(code, "docs/operating/webhooks.md", "exec"), namespace)
    return namespace["verify"]


def post(url: str, headers: dict, body: bytes) -> int:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as answered:
            return answered.status
    except urllib.error.HTTPError as refused:
        return refused.code


def test_a_receiver_written_from_the_docs_accepts_a_delivery_and_refuses_a_tampered_one(
    project, propose, receiver
):
    verify = documented_verify()
    hook = endpoint(project, receiver.url, ["operation.waiting"])
    receiver.answer = lambda _n, headers, body: 204 if verify(hook.shown, headers, body) else 401
    propose("call-1")

    deliver_webhooks()

    assert hook.deliveries.get().status == DELIVERED
    [(headers, body, _)] = receiver.posts
    sent = {name: value for name, value in headers.items() if name.startswith("Oversight-")}
    tampered = body.replace(b'"risk": "medium"', b'"risk": "low"')
    assert tampered != body
    assert post(receiver.url, sent, body) == 204  # The same, again: still signed.
    assert post(receiver.url, sent, tampered) == 401
    stale = {**sent, "Oversight-Timestamp": str(int(time.time()) - 3600)}
    stale["Oversight-Signature"] = signature_of(hook.shown, stale, body)
    assert post(receiver.url, stale, body) == 401  # Signed, an hour ago: a replay.
