"""Every read from a target has a budget (#31): a total deadline over connecting,
sending and the whole answer, and a size cap on the body. A target that trickles a byte
every half second (a timeout per wait never fires), sends 50 MB, or accepts and never
answers, costs a worker or a reviewer's page the deadline at most, and what was cut short
means what it must: a call is left to verification (it may have acted), a verification
is uncertain, a precondition fails, a preview says why. Real local servers, through the
real worker."""

import contextlib
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler

import pytest
from django.core.exceptions import ImproperlyConfigured

from runs.actions.http import OverBudget, fetch
from runs.demo.target import Handler, TargetState
from runs.models import Decision, Operation
from tests.helpers import decide_on, drained, page_of, post_decision, project_settings
from tests.test_http_redirects import serve

Status = Operation.Status
DEADLINE = 1  # seconds, all of a request
CAP = 100_000  # bytes of an answer's body
MARGIN = 3.0  # seconds: a loaded two-core machine is slow, never this slow
HUGE = 50 * 2**20
OVERRUN = {
    "trickle": f"the target did not finish answering within {DEADLINE} s",
    "huge": f"the answer is too large (over {CAP:,} bytes)",
    "silent": f"the target did not finish answering within {DEADLINE} s",
}


def trickle(handler: BaseHTTPRequestHandler) -> None:
    """A 200 whose body comes a byte every half second, forever."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.end_headers()
    while not handler.server.stop.wait(0.5):
        handler.wfile.write(b" ")


def huge(handler: BaseHTTPRequestHandler) -> None:
    """A 200 with a 50 MB body, counted as it goes out."""
    handler.send_response(200)
    handler.send_header("Content-Length", str(HUGE))
    handler.end_headers()
    chunk = b"x" * 2**16
    for _ in range(HUGE // len(chunk)):
        handler.wfile.write(chunk)
        handler.server.sent += len(chunk)


def silent(handler: BaseHTTPRequestHandler) -> None:
    """The request read, no answer ever."""
    handler.server.stop.wait()


WAYS = {"trickle": trickle, "huge": huge, "silent": silent}


class Hostile(Handler):
    """The demo target, but an answer the test picks (``server.picks(handler)``) is
    replaced by ``server.way`` once the request has done its work there."""

    def _reply(self, status: int, body: dict, headers: dict | None = None) -> None:
        if not self.server.picks(self):
            return super()._reply(status, body, headers)
        self.close_connection = True
        with contextlib.suppress(OSError):  # Oversight hung up.
            WAYS[self.server.way](self)


def start(way: str, settings, tls=None):
    """A ``Hostile`` target answering well until told (``picks``), allow-listed, and the
    budget small."""
    server = serve(type("Target", (Hostile,), {"state": TargetState()}))
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
        server.base = server.base.replace("http://", "https://")
    server.way, server.picks = way, lambda handler: False
    server.items = server.RequestHandlerClass.state.items
    server.sent, server.stop = 0, threading.Event()
    settings.OVERSIGHT_HTTP_ALLOWED_HOSTS = [
        *settings.OVERSIGHT_HTTP_ALLOWED_HOSTS,
        f"127.0.0.1:{server.server_address[1]}",
    ]
    settings.OVERSIGHT_HTTP_DEADLINE = DEADLINE
    settings.OVERSIGHT_HTTP_MAX_RESPONSE_BYTES = CAP
    return server


def stop(server) -> None:
    server.stop.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def hostile(request, settings):
    server = start(request.param, settings)
    yield server
    stop(server)


def cut_short_in_time(server, started: float) -> None:
    """The hostile read took the deadline at most (one of them, among quick ones), and
    the 50 MB were not read whole."""
    assert time.monotonic() - started < DEADLINE + MARGIN
    assert server.sent < HUGE


def approved_put(propose, reviewer, server, **more) -> Operation:
    """An approved PUT of a green item, verified by reading it back; a person reconciles
    if verification does not show it."""
    arguments = {
        "method": "PUT",
        "url": f"{server.base}/items/x",
        "body": {"colour": "green"},
        "verify": {"url": f"{server.base}/items/x", "json": {"colour": "green"}},
        **more,
    }
    op = propose("put", action="http.request", arguments=arguments, rollback_kind="out_of_band")
    decide_on(op, reviewer)
    return op


@pytest.mark.parametrize("hostile", list(WAYS), indirect=True)
def test_a_read_ends_within_the_deadline_whatever_the_target_does(hostile):
    hostile.picks = lambda handler: True
    started = time.monotonic()

    with pytest.raises(OverBudget) as cut:
        fetch(f"{hostile.base}/items/x")

    assert str(cut.value) == f"GET {hostile.base}/items/x: {OVERRUN[hostile.way]}"
    cut_short_in_time(hostile, started)


@pytest.mark.parametrize("hostile", list(WAYS), indirect=True)
def test_a_call_cut_short_after_it_acted_is_verified_and_committed(propose, reviewer, hostile):
    """The target applied the PUT, then overran: "refused" would be a lie."""
    hostile.picks = lambda handler: handler.command == "PUT"
    op = approved_put(propose, reviewer, hostile)
    started = time.monotonic()

    op = drained(op)

    assert op.status == Status.COMMITTED
    assert op.result["verified"] is True
    cut_short_in_time(hostile, started)


@pytest.mark.parametrize("hostile", list(WAYS), indirect=True)
def test_a_call_cut_short_without_a_visible_effect_goes_to_a_person(propose, reviewer, hostile):
    """The target did nothing with the PUT (a path it does not know), then overran.
    Verification does not show the effect, but the request reached the target, which may
    yet act on it: never "not applied", a person reconciles."""
    hostile.picks = lambda handler: handler.command == "PUT"
    op = approved_put(propose, reviewer, hostile, url=f"{hostile.base}/elsewhere/x")
    started = time.monotonic()

    op = drained(op)

    assert op.status == Status.ALERTED
    assert op.result["effect"] == "uncertain"
    assert f"PUT {hostile.base}/elsewhere/x: {OVERRUN[hostile.way]}" in op.status_reason
    cut_short_in_time(hostile, started)


@pytest.mark.parametrize("hostile", list(WAYS), indirect=True)
def test_a_verification_cut_short_is_uncertain(propose, reviewer, hostile):
    """The item is stored, but reading it back overruns: the worker cannot tell, and
    says so at once rather than trying again, and again, as long each time."""
    hostile.picks = lambda handler: handler.command == "GET" and hostile.items
    op = approved_put(propose, reviewer, hostile)
    started = time.monotonic()

    op = drained(op)

    assert op.status == Status.ALERTED
    assert op.result["effect"] == "uncertain"
    assert hostile.items == {"x": {"colour": "green"}}
    cut_short_in_time(hostile, started)


@pytest.mark.parametrize("hostile", list(WAYS), indirect=True)
def test_a_precondition_cut_short_fails(propose, reviewer, hostile):
    hostile.picks = lambda handler: handler.path == "/status"
    op = approved_put(propose, reviewer, hostile, precondition={"url": f"{hostile.base}/status"})
    started = time.monotonic()

    op = drained(op)

    assert op.status == Status.PRECONDITION_FAILED
    assert op.status_reason == f"GET {hostile.base}/status: {OVERRUN[hostile.way]}"
    assert hostile.items == {}  # The call was never made.
    cut_short_in_time(hostile, started)


@pytest.mark.parametrize("hostile", list(WAYS), indirect=True)
def test_a_preview_says_the_target_overran_and_the_reviewer_can_decide(
    client, propose, reviewer, hostile
):
    hostile.picks = lambda handler: handler.command == "GET"
    arguments = {
        "method": "PUT",
        "url": f"{hostile.base}/items/x",
        "verify": {"url": f"{hostile.base}/items/x"},
    }
    op = propose("put", action="http.request", arguments=arguments, rollback_kind="out_of_band")
    client.force_login(reviewer)
    started = time.monotonic()

    page = client.get(page_of(op))

    assert page.status_code == 200
    assert f"GET {hostile.base}/items/x: {OVERRUN[hostile.way]}." in page.text
    cut_short_in_time(hostile, started)
    # The same words each time: the decision is not refused as made on another preview.
    assert post_decision(client, op, confirm="http.request").status_code == 302
    assert Decision.objects.filter(operation=op, kind=Decision.Kind.APPROVE).exists()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1 (``cert.pem``) and its key (``key.pem``)."""
    folder = tmp_path_factory.mktemp("tls")
    subject = ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
    keys = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    files = ["-keyout", str(folder / "key.pem"), "-out", str(folder / "cert.pem")]
    command = ["openssl", "req", "-x509", "-days", "1", *subject, *keys, *files]
    subprocess.run(command, check=True, capture_output=True)
    return folder


@pytest.fixture
def tls_target(settings, monkeypatch, certificate):
    """A ``Hostile`` server over TLS, its certificate trusted as an authority's would be."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificate / "cert.pem", certificate / "key.pem")
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate / "cert.pem"))
    server = start("trickle", settings, tls=context)
    yield server
    stop(server)


def test_over_tls_an_answer_is_read_and_a_trickle_cut_short(tls_target):
    server = tls_target
    server.items["x"] = {"colour": "green"}

    answer = fetch(f"{server.base}/items/x")

    assert (answer.status, answer.body) == (200, {"colour": "green"})
    server.picks = lambda handler: True
    started = time.monotonic()
    with pytest.raises(OverBudget, match=OVERRUN["trickle"]):
        fetch(f"{server.base}/items/x")
    cut_short_in_time(server, started)


def test_the_budget_is_the_http_timeout_and_a_mebibyte_unless_set(monkeypatch):
    """By default the deadline is OVERSIGHT_HTTP_TIMEOUT_SECONDS, which http.request
    used per wait before: an installation that raised it for a slow target keeps it."""
    budget = ("OVERSIGHT_HTTP_DEADLINE", "OVERSIGHT_HTTP_MAX_RESPONSE_BYTES")
    configured = project_settings(monkeypatch)
    assert [configured[name] for name in budget] == [10, 2**20]
    configured = project_settings(monkeypatch, OVERSIGHT_HTTP_TIMEOUT_SECONDS="30")
    assert [configured[name] for name in budget] == [30, 2**20]
    configured = project_settings(
        monkeypatch, OVERSIGHT_HTTP_DEADLINE_SECONDS="5", OVERSIGHT_HTTP_MAX_RESPONSE_BYTES="4096"
    )
    assert [configured[name] for name in budget] == [5, 4096]
    with pytest.raises(ImproperlyConfigured, match="OVERSIGHT_HTTP_DEADLINE_SECONDS"):
        project_settings(monkeypatch, OVERSIGHT_HTTP_DEADLINE_SECONDS="0")
