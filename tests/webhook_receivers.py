"""Receivers of webhooks on loopback, for the tests: each keeps what it is POSTed and
answers as the test says; and endpoints whose secret (shown once) the test keeps."""

import hashlib
import hmac
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from runs.models import WebhookDelivery, WebhookEndpoint, WebhookEvent

ALL = list(WebhookEvent.Kind)


class Receiver(BaseHTTPRequestHandler):
    """Keeps each POST (headers, body, when it arrived) and answers it with
    ``server.answer(n)`` (n counts from 1), which may take its time."""

    def log_message(self, format, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.lock:
            self.server.posts.append((dict(self.headers), body, time.monotonic()))
            number = len(self.server.posts)
        status = self.server.answer(number, self.headers, body)
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


def serve(handler=Receiver) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.posts, server.lock = [], threading.Lock()
    server.answer = lambda _number, _headers, _body: 200
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/oversight"
    return server


@pytest.fixture
def receivers(settings):
    """``receivers(n)``: n receivers on loopback, allowed by OVERSIGHT_HTTP_ALLOWED_HOSTS."""
    started = []

    def start(count: int = 1) -> list[ThreadingHTTPServer]:
        servers = [serve() for _ in range(count)]
        started.extend(servers)
        settings.OVERSIGHT_HTTP_ALLOWED_HOSTS = [
            f"127.0.0.1:{server.server_address[1]}" for server in started
        ]
        return servers

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


@pytest.fixture
def receiver(receivers) -> ThreadingHTTPServer:
    return receivers(1)[0]


def endpoint(project, url: str, events=ALL, name: str = "Teams bot") -> WebhookEndpoint:
    """An endpoint, with its secret (shown once) on ``.shown``."""
    made, secret = WebhookEndpoint.add(project=project, name=name, url=url, events=list(events))
    made.shown = secret
    return made


def signature_of(secret: str, headers: dict, body: bytes) -> str:
    signed = headers["Oversight-Timestamp"].encode() + b"." + body
    return "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def endpoint_with_delivery(project, status: str) -> tuple[WebhookEndpoint, WebhookDelivery]:
    """An endpoint of ``project`` (https, not sent to by the tests that use it) and one
    delivery of it, in ``status``."""
    hook, _ = WebhookEndpoint.add(
        project=project, name="bot", url="https://hooks.example.com/", events=["decided"]
    )
    event = WebhookEvent.objects.create(project=project, kind="decided", data={})
    return hook, WebhookDelivery.objects.create(endpoint=hook, event=event, status=status)
