"""Alert deliveries go out at least once, with an id receivers deduplicate on, and a
success stays recorded: a worker's claim outlasts its send, and only the attempt that
holds the delivery may record the outcome. They are due in the database's clock, not
the raising host's. A failed attempt is logged, and retried further apart for a day.
The SMTP mailer gets its server and a timeout, which bounds an email delivery's send."""

import logging
import smtplib
import threading
from datetime import timedelta
from email import message_from_bytes, policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail
from django.core.exceptions import ImproperlyConfigured
from django.core.mail.backends import locmem
from django.db import connection
from django.utils import timezone

from runs.clock import db_now
from runs.engine.deliveries import deliver_due, delivery_id
from runs.engine.worker import Worker
from runs.models import Alert, AlertDelivery
from runs.services.alerts import send_alert_again
from tests.helpers import project_settings

pytest_plugins = ["tests.ports"]

SMTP = "django.core.mail.backends.smtp.EmailBackend"
DELIVERED = AlertDelivery.Status.DELIVERED
PENDING, FAILED = AlertDelivery.Status.PENDING, AlertDelivery.Status.FAILED
DAY = timedelta(days=1)


class Hook(BaseHTTPRequestHandler):
    """Counts POSTs and answers each with ``server.answer(n)`` (n counts from 1)."""

    def log_message(self, format, *args) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.lock:
            self.server.posts += 1
            self.server.ids.append(self.headers["Oversight-Delivery"])
            number = self.server.posts
        self.send_response(self.server.answer(number))
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def hook():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    server.posts, server.lock, server.answer = 0, threading.Lock(), lambda _number: 200
    server.ids = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def webhook_to(run, url: str) -> AlertDelivery:
    alert = Alert.objects.create(project=run.project, run=run, summary="Reconcile the ledger")
    return AlertDelivery.objects.create(
        alert=alert, channel=AlertDelivery.Channel.WEBHOOK, target=url, next_attempt_at=db_now()
    )


@pytest.fixture
def delivery(run, hook) -> AlertDelivery:
    return webhook_to(run, f"http://127.0.0.1:{hook.server_address[1]}/hook/s3cret-path")


@pytest.fixture
def refused(run, refused_port) -> AlertDelivery:
    """A webhook delivery to a port nobody listens on: each attempt is refused."""
    return webhook_to(run, f"http://127.0.0.1:{refused_port}/hook")


def in_thread(target) -> threading.Thread:
    """Another worker: its own database connection, closed when it is done."""

    def body() -> None:
        try:
            target()
        finally:
            connection.close()

    thread = threading.Thread(target=body)
    thread.start()
    return thread


def first_held_then_failed(hook) -> tuple[threading.Event, threading.Event]:
    """The hook holds the first POST until told, then answers it 500; later ones get 200.
    Returns the events "the first is in flight" and "it may fail now"."""
    in_flight, may_fail = threading.Event(), threading.Event()

    def answer(number: int) -> int:
        if number > 1:
            return 200
        in_flight.set()
        may_fail.wait(timeout=30)
        return 500

    hook.answer = answer
    return in_flight, may_fail


@pytest.mark.django_db(transaction=True)
def test_a_slow_webhook_is_not_sent_again_by_a_second_worker(delivery, hook, settings):
    """The first worker's claim outlasts the longest its send may take (the timeout):
    while the receiver takes its time, however long within it, a second finds it held."""
    in_flight, may_answer = threading.Event(), threading.Event()

    def answer_when_told(_number: int) -> int:
        in_flight.set()
        may_answer.wait(timeout=60)
        return 200

    hook.answer = answer_when_told
    timeout = timedelta(seconds=settings.OVERSIGHT_HTTP_TIMEOUT)
    before = db_now()

    first = in_thread(deliver_due)
    assert in_flight.wait(timeout=60)
    delivery.refresh_from_db()
    assert delivery.next_attempt_at > before + timeout
    assert deliver_due() == 0  # The first worker still holds it.
    may_answer.set()
    first.join()

    delivery.refresh_from_db()
    assert hook.posts == 1
    assert (delivery.status, delivery.attempts) == (DELIVERED, 1)


@pytest.mark.django_db(transaction=True)
def test_a_late_failure_of_a_superseded_attempt_leaves_the_delivery_delivered(delivery, hook):
    first_in_flight, first_may_fail = first_held_then_failed(hook)
    first = in_thread(deliver_due)
    assert first_in_flight.wait(timeout=10)
    # The first worker's claim lapses while it is still sending; a second takes over.
    AlertDelivery.objects.filter(pk=delivery.pk).update(
        next_attempt_at=db_now() - timedelta(seconds=1)
    )
    assert deliver_due() == 1
    first_may_fail.set()
    first.join()

    delivery.refresh_from_db()
    assert hook.posts == 2
    assert (delivery.status, delivery.attempts, delivery.last_error) == (DELIVERED, 2, "")


@pytest.mark.django_db(transaction=True)
def test_a_failure_that_a_send_again_overtook_does_not_give_the_delivery_up(
    delivery, hook, admin_user
):
    first_in_flight, first_may_fail = first_held_then_failed(hook)
    # Its day of retries ends in the middle of this attempt.
    AlertDelivery.objects.filter(pk=delivery.pk).update(retrying_since=db_now() - DAY)
    first = in_thread(deliver_due)
    assert first_in_flight.wait(timeout=10)
    assert send_alert_again(alert=delivery.alert, user=admin_user) == 1
    first_may_fail.set()
    first.join()

    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.last_error) == (PENDING, 1, "")
    assert deliver_due() == 1  # Due at once, as the admin asked.
    delivery.refresh_from_db()
    assert (hook.posts, delivery.status, delivery.attempts) == (2, DELIVERED, 2)


def test_the_smtp_mailer_gets_its_server_and_a_timeout(monkeypatch, settings):
    environ = {
        "OVERSIGHT_EMAIL_BACKEND": SMTP,
        "OVERSIGHT_EMAIL_HOST": "mail.example.com",
        "OVERSIGHT_EMAIL_PORT": "2525",
        "OVERSIGHT_EMAIL_TIMEOUT_SECONDS": "7",
    }
    configured = project_settings(monkeypatch, **environ)

    assert configured["OVERSIGHT_EMAIL_TIMEOUT"] == 7
    settings.MAILERS = configured["MAILERS"]
    mailer = mail.mailers.default  # Built as the workers build it; connects only to send.
    assert (mailer.host, mailer.port, mailer.timeout) == ("mail.example.com", 2525, 7)


def test_the_smtp_mailer_defaults_to_a_local_server_and_ten_seconds(monkeypatch):
    configured = project_settings(monkeypatch, OVERSIGHT_EMAIL_BACKEND=SMTP)

    assert configured["MAILERS"]["default"] == {
        "BACKEND": SMTP,
        "OPTIONS": {"host": "localhost", "port": 25, "timeout": 10},
    }


def test_other_mailers_get_no_smtp_options(monkeypatch, settings):
    console = "django.core.mail.backends.console.EmailBackend"
    configured = project_settings(monkeypatch, OVERSIGHT_EMAIL_BACKEND=console)

    assert configured["MAILERS"]["default"] == {"BACKEND": console}
    settings.MAILERS = configured["MAILERS"]
    assert mail.mailers.default  # The console backend refuses options it does not know.


@pytest.mark.parametrize("raw", ["0", "soon"])
def test_an_email_timeout_under_a_second_stops_start_up(monkeypatch, raw):
    with pytest.raises(ImproperlyConfigured, match="OVERSIGHT_EMAIL_TIMEOUT_SECONDS"):
        project_settings(monkeypatch, OVERSIGHT_EMAIL_TIMEOUT_SECONDS=raw)


def test_deliveries_are_retried_for_a_day_with_no_attempt_limit_unless_set(monkeypatch):
    monkeypatch.delenv("OVERSIGHT_ALERT_RETRY_HOURS", raising=False)
    monkeypatch.delenv("OVERSIGHT_ALERT_MAX_ATTEMPTS", raising=False)
    default = project_settings(monkeypatch)
    assert (default["OVERSIGHT_ALERT_RETRY"], default["OVERSIGHT_ALERT_MAX_ATTEMPTS"]) == (
        DAY,
        None,
    )

    configured = project_settings(
        monkeypatch, OVERSIGHT_ALERT_RETRY_HOURS="72", OVERSIGHT_ALERT_MAX_ATTEMPTS="50"
    )
    assert configured["OVERSIGHT_ALERT_RETRY"] == timedelta(hours=72)
    assert configured["OVERSIGHT_ALERT_MAX_ATTEMPTS"] == 50


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("OVERSIGHT_ALERT_RETRY_HOURS", "0"),
        ("OVERSIGHT_ALERT_RETRY_HOURS", "a day"),
        ("OVERSIGHT_ALERT_MAX_ATTEMPTS", "0"),
    ],
)
def test_a_retry_span_under_an_hour_or_no_attempt_at_all_stops_start_up(monkeypatch, name, raw):
    with pytest.raises(ImproperlyConfigured, match=name):
        project_settings(monkeypatch, **{name: raw})


# --- The database's clock -------------------------------------------------------------


def test_an_alert_raised_on_a_host_whose_clock_runs_ahead_goes_out_at_once(
    approved, admin_user, monkeypatch
):
    operation = approved("http-rigged-no-undo")
    host_clock = timezone.now
    with monkeypatch.context() as ahead:  # The raising host only; the database keeps time.
        ahead.setattr(timezone, "now", lambda: host_clock() + timedelta(minutes=10))
        Worker().step()
    alert = Alert.objects.get(operation=operation)

    assert deliver_due() == 1

    assert [m.to for m in mail.outbox] == [[admin_user.email]]
    assert alert.deliveries.get(channel=AlertDelivery.Channel.EMAIL).status == DELIVERED


# --- At least once, with an id to deduplicate on ---------------------------------------


class AcceptedThenCut(locmem.EmailBackend):
    """A mail server that takes the first message, then drops the connection before it
    confirms: the sender cannot tell, and sends it again."""

    def send_messages(self, messages) -> int:
        sent = super().send_messages(messages)
        if len(mail.outbox) == 1:
            raise smtplib.SMTPServerDisconnected("Connection unexpectedly closed")
        return sent


def message_id(email) -> str:
    """The Message-ID as a receiving server parses it, refusing one that is not a valid
    RFC 5322 msg-id."""
    header = message_from_bytes(email.message().as_bytes(), policy=policy.default)["Message-ID"]
    assert not header.defects, header.defects
    return str(header)


def test_an_email_sent_twice_carries_the_same_message_id_and_each_recipient_its_own(
    approved, admin_user, settings
):
    settings.OVERSIGHT_BASE_URL = "https://oversight.example.com:8443/"
    settings.OVERSIGHT_ALERT_EMAILS = ["oncall@example.com"]
    settings.MAILERS = {"default": {"BACKEND": f"{__name__}.AcceptedThenCut"}}
    operation = approved("http-rigged-no-undo")
    Worker().step()
    emails = Alert.objects.get(operation=operation).deliveries.filter(channel="email")
    admins, oncall = emails.get(target=admin_user.email), emails.get(target="oncall@example.com")

    assert deliver_due() == 2  # The first is cut after the server took it: retried.
    assert deliver_due(now=db_now() + timedelta(minutes=1)) == 1

    by_recipient = [(m.to, message_id(m)) for m in mail.outbox]
    ids = {
        delivery.target: f"<alert-{delivery.alert_id}.delivery-{delivery.pk}@oversight.example.com>"
        for delivery in (admins, oncall)
    }
    cut = mail.outbox[0].to[0]  # Both are due at once: either may be sent first.
    sent = [admin_user.email, "oncall@example.com", cut]
    assert sorted(by_recipient) == sorted(([to], ids[to]) for to in sent)
    assert set(emails.values_list("status", flat=True)) == {DELIVERED}


def test_a_webhook_retried_carries_the_same_delivery_id_and_another_delivery_its_own(
    delivery, hook, run, settings
):
    settings.OVERSIGHT_BASE_URL = "http://[::1]:8000"
    hook.answer = lambda number: 500 if number == 1 else 200
    second = webhook_to(run, delivery.target)

    assert deliver_due() == 2
    assert deliver_due(now=db_now() + timedelta(minutes=1)) == 1

    first_id = f"alert-{delivery.alert_id}.delivery-{delivery.pk}@[::1]"
    assert sorted(hook.ids) == sorted([first_id, first_id, delivery_id(second)])
    assert delivery_id(second) != first_id
    email = mail.EmailMessage(
        "s", "b", to=["a@example.com"], headers={"Message-ID": f"<{first_id}>"}
    )
    assert message_id(email) == f"<{first_id}>"  # A domain literal: still a valid msg-id.


# --- Failed attempts: logged, and retried further apart for a day ----------------------


def test_a_failed_attempt_is_logged_with_its_reason_and_not_its_target(delivery, hook, caplog):
    hook.answer = lambda _number: 503

    with caplog.at_level(logging.WARNING, logger="runs.engine.deliveries"):
        assert deliver_due() == 1

    (record,) = [r for r in caplog.records if r.name == "runs.engine.deliveries"]
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        f"alert {delivery.alert_id}: webhook delivery {delivery.pk}, attempt 1 failed: "
        "the webhook answered 503; next try in 5 s"
    )
    assert record.exc_info is None  # The receiver's answer: no traceback, no bug of ours.
    assert "s3cret" not in caplog.text
    delivery.refresh_from_db()
    assert (delivery.status, delivery.last_error) == (
        PENDING,
        "attempt 1: the webhook answered 503",
    )


def test_a_refused_email_is_logged_in_the_mail_s_own_words(run, settings, caplog, refused_port):
    settings.MAILERS = {
        "default": {"BACKEND": SMTP, "OPTIONS": {"host": "127.0.0.1", "port": refused_port}}
    }
    alert = Alert.objects.create(project=run.project, run=run, summary="Reconcile the ledger")
    email = AlertDelivery.objects.create(
        alert=alert, channel="email", target="ops@example.com", next_attempt_at=db_now()
    )

    with caplog.at_level(logging.WARNING, logger="runs.engine.deliveries"):
        assert deliver_due() == 1

    assert caplog.messages == [
        f"alert {alert.pk}: email delivery {email.pk}, attempt 1 failed: "
        "the target refused the connection; next try in 5 s"
    ]
    assert "ops@example.com" not in caplog.text


@pytest.mark.parametrize(
    ("retrying_for", "waits"),
    [
        (timedelta(0), timedelta(seconds=5)),
        (timedelta(seconds=40), timedelta(seconds=40)),
        (timedelta(hours=5), timedelta(hours=1)),
    ],
)
def test_a_failing_delivery_is_retried_further_apart(refused, retrying_for, waits):
    since = db_now() - retrying_for
    AlertDelivery.objects.filter(pk=refused.pk).update(attempts=30, retrying_since=since)
    before = db_now()

    assert deliver_due() == 1

    refused.refresh_from_db()
    assert (refused.status, refused.attempts) == (PENDING, 31)
    assert refused.last_error == "attempt 31: the target refused the connection"
    assert before + waits <= refused.next_attempt_at <= db_now() + waits + timedelta(seconds=1)


def test_the_last_try_is_a_day_after_the_alert_then_the_delivery_is_given_up(refused):
    since = db_now() - DAY + timedelta(seconds=10)
    AlertDelivery.objects.filter(pk=refused.pk).update(retrying_since=since)

    assert deliver_due() == 1

    refused.refresh_from_db()
    assert (refused.status, refused.next_attempt_at) == (PENDING, since + DAY)
    # That last try, once the day is over:
    AlertDelivery.objects.filter(pk=refused.pk).update(retrying_since=since - timedelta(seconds=10))

    assert deliver_due(now=since + DAY) == 1

    refused.refresh_from_db()
    assert (refused.status, refused.next_attempt_at, refused.attempts) == (FAILED, None, 2)
    assert refused.last_error == "attempt 2: the target refused the connection"
    assert deliver_due(now=db_now() + DAY) == 0
