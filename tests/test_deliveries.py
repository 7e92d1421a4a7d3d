"""Alert deliveries go out once and a success stays recorded: a worker's claim outlasts
its send, and only the attempt that holds the delivery may record the outcome. The SMTP
mailer gets its server and a timeout, which bounds an email delivery's send."""

import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

from runs.clock import db_now
from runs.engine.deliveries import deliver_due
from runs.models import Alert, AlertDelivery
from tests.helpers import project_settings

SMTP = "django.core.mail.backends.smtp.EmailBackend"
DELIVERED = AlertDelivery.Status.DELIVERED


class Hook(BaseHTTPRequestHandler):
    """Counts POSTs and answers each with ``server.answer(n)`` (n counts from 1)."""

    def log_message(self, format, *args) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.lock:
            self.server.posts += 1
            number = self.server.posts
        self.send_response(self.server.answer(number))
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def hook():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    server.posts, server.lock, server.answer = 0, threading.Lock(), lambda _number: 200
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def delivery(run, hook) -> AlertDelivery:
    alert = Alert.objects.create(project=run.project, run=run, summary="Reconcile the ledger")
    return AlertDelivery.objects.create(
        alert=alert,
        channel=AlertDelivery.Channel.WEBHOOK,
        target=f"http://127.0.0.1:{hook.server_address[1]}/hook",
        next_attempt_at=db_now(),
    )


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


@pytest.mark.django_db(transaction=True)
def test_a_slow_webhook_is_not_sent_again_by_a_second_worker(delivery, hook, settings):
    assert settings.OVERSIGHT_HTTP_TIMEOUT == 10
    hook.answer = lambda _number: time.sleep(6) or 200  # Slow, but within the timeout.

    first = in_thread(deliver_due)
    time.sleep(5.5)
    assert deliver_due() == 0  # The first worker still holds it.
    first.join()

    delivery.refresh_from_db()
    assert hook.posts == 1
    assert (delivery.status, delivery.attempts) == (DELIVERED, 1)


@pytest.mark.django_db(transaction=True)
def test_a_late_failure_of_a_superseded_attempt_leaves_the_delivery_delivered(delivery, hook):
    first_in_flight, first_may_fail = threading.Event(), threading.Event()

    def answer(number: int) -> int:
        if number > 1:
            return 200
        first_in_flight.set()
        first_may_fail.wait(timeout=30)
        return 500

    hook.answer = answer
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
