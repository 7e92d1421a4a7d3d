"""``http.request`` reaches only what was approved (#11, hole 2): a redirect from an
allow-listed host is never followed — not for the call, the verify GET or the
precondition GET — and a name that resolves to an internal address is refused unless
its exact ``host:port`` is allow-listed. Real local servers; only the resolver is a
stub (a made-up name answering the addresses under test)."""

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from runs.models import Operation
from tests.helpers import drained

Status = Operation.Status
SECRET = "internal-only-7f3a"


class Internal(BaseHTTPRequestHandler):
    """A service the agent must never reach: it answers everything with a secret, and
    with the field the operations expect (so a request that reached it would verify)."""

    def do_GET(self) -> None:
        self.server.seen.append((self.command, self.path, dict(self.headers)))
        data = json.dumps({"colour": "green", "secret": SECRET}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_POST = do_PUT = do_DELETE = do_GET

    def log_message(self, format, *args) -> None:
        pass


class Redirector(BaseHTTPRequestHandler):
    """An allow-listed host that sends every request on to ``self.server.to``."""

    def do_GET(self) -> None:
        self.send_response(302)
        self.send_header("Location", f"{self.server.to}{self.path}")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_PUT = do_DELETE = do_GET

    def log_message(self, format, *args) -> None:
        pass


def serve(handler: type[BaseHTTPRequestHandler]):
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.seen = []
    server.base = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def internal():
    server = serve(Internal)
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def redirector(settings, target, internal):
    """A host:port on the allow-list (beside the demo target) redirecting to ``internal``,
    which is not on it."""
    server = serve(Redirector)
    server.to = internal.base
    settings.OVERSIGHT_HTTP_ALLOWED_HOSTS = [
        *settings.OVERSIGHT_HTTP_ALLOWED_HOSTS,
        server.base.removeprefix("http://"),
    ]
    yield server
    server.shutdown()
    server.server_close()


def outcome(op: Operation) -> str:
    """Everything the agent and the reviewers read of the operation's end."""
    return json.dumps([op.result, op.status_reason])


@pytest.mark.parametrize(
    "redirected, status",
    [
        # The call was sent and answered: it may have acted (a 303 would say it did), so
        # verification decides; it cannot show the effect, so a person is alerted.
        ("call", Status.ALERTED),
        # The verify GET shows nothing of the resource: uncertain, never "absent", and
        # the compensation is not attempted on a state it cannot see.
        ("verify", Status.ALERTED),
        ("precondition", Status.PRECONDITION_FAILED),
    ],
)
def test_a_redirect_is_reported_and_never_followed(
    approved, target, redirector, internal, redirected, status
):
    urls = {
        "call": {"method": "POST", "url": f"{redirector.base}/items/x"},
        "verify": {"verify": {"url": f"{redirector.base}/items/x", "json": {"colour": "green"}}},
        "precondition": {"precondition": {"url": f"{redirector.base}/status"}},
    }[redirected]

    op = drained(approved("http", **urls))

    assert internal.seen == []
    assert op.status == status
    assert "a redirect to http://127.0.0.1:" in op.status_reason
    assert "which Oversight does not follow" in op.status_reason
    assert SECRET not in outcome(op)


@pytest.fixture
def resolver(monkeypatch):
    """``resolver(name, addresses, port)``: from now on ``name`` resolves to these
    addresses, all at ``port`` (whatever port was asked for); other names as usual."""
    real = socket.getaddrinfo

    def answer(name: str, addresses: list[str], port: int) -> None:
        def getaddrinfo(host, *args, **kwargs):
            if host != name:
                return real(host, *args, **kwargs)
            return [
                (socket.AF_INET6, socket.SOCK_STREAM, 6, "", (a, port, 0, 0))
                if ":" in a
                else (socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
                for a in addresses
            ]

        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)

    return answer


def inward_arguments(netloc: str) -> dict:
    return {
        "method": "PUT",
        "url": f"http://{netloc}/items/x",
        "body": {"colour": "green"},
        "verify": {"url": f"http://{netloc}/items/x", "json": {"colour": "green"}},
    }


@pytest.mark.parametrize(
    "addresses",
    [
        ["127.0.0.1"],
        ["10.0.0.1"],
        ["::1"],
        ["169.254.169.254"],
        ["::ffff:127.0.0.1"],
        ["0.0.0.0"],
        ["224.0.0.1"],
        ["fd00::1"],
        ["127.0.0.1", "93.184.216.34"],  # One inward answer among public ones is enough.
    ],
)
def test_a_name_resolving_inward_is_refused_when_only_its_host_is_allowed(
    settings, approved, internal, resolver, addresses
):
    """``inward.test`` is allow-listed as a bare host: public addresses only."""
    settings.OVERSIGHT_HTTP_ALLOWED_HOSTS = ["inward.test"]
    settings.OVERSIGHT_HTTP_TIMEOUT = 1
    resolver("inward.test", addresses, internal.server_address[1])

    op = drained(approved("http-rigged-no-undo", **inward_arguments("inward.test")))

    assert internal.seen == []
    assert op.status == Status.PRECONDITION_FAILED
    assert f"inward.test resolves to {addresses[0]}, an internal address" in op.status_reason


def test_a_name_resolving_inward_is_called_when_its_host_port_is_allowed(
    settings, approved, internal, resolver
):
    """Allow-listed as ``host:port``: the call goes to the address the name resolved to,
    under the name (Host header), and verifies."""
    port = internal.server_address[1]
    settings.OVERSIGHT_HTTP_ALLOWED_HOSTS = [f"inward.test:{port}"]
    resolver("inward.test", ["::1", "127.0.0.1"], port)  # Nothing listens on the first.

    op = drained(approved("http-rigged-no-undo", **inward_arguments(f"inward.test:{port}")))

    assert op.status == Status.COMMITTED
    assert ("PUT", "/items/x") in [(method, path) for method, path, _ in internal.seen]
    assert {headers["Host"] for *_, headers in internal.seen} == {f"inward.test:{port}"}
