"""Both clients when things go wrong between the agent and the server: waits that keep
failing closed whatever interrupts them, a server with a shorter long poll, a proposal
repeated after a restart or after a server error, a host with more than one address,
and answers cut short or not JSON at all."""

import asyncio
import http.server
import inspect
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from typing import Any

import pytest

from oversight_client import AsyncOversight, InvalidResponse, Oversight, WaitTimedOut
from runs.models import Operation
from tests.client_helpers import CLIENTS, NOTE, client_for, drive, reviewing
from tests.helpers import decide_on
from tests.test_api_waits import until_long_polls_wait
from tests.test_client import FlakyProxy, read_request

LOGIN_PAGE = b"<html><body>Please log in</body></html>"
ERROR_PAGE = b"<h1>Server Error (500)</h1>"
SERVER_ERROR = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: %d\r\n\r\n%s" % (
    len(ERROR_PAGE),
    ERROR_PAGE,
)

pytest_plugins = ["tests.client_helpers"]


def proposed(ovs: Oversight, run_id: int, call_id: str = "note-1", **options: Any) -> dict:
    return ovs.propose(run_id, call_id, arguments={"line": "paid"}, **NOTE, **options)


def status(call_id: str) -> str:
    return Operation.objects.get(call_id=call_id).status


# --- waits fail closed, whatever ends them ----------------------------------------------


def test_waits_refused_with_429s_poll_again_then_withdraw(
    settings, tmp_path, live_server, client_token, ovs, run_id
):
    """Two waits of a token the server lets wait once at a time: the one refused (429,
    and no retries left) polls again until its deadline, then withdraws, as the other."""
    settings.VAR_DIR = tmp_path  # this test's wait slots only
    settings.OVERSIGHT_API_MAX_WAITS_PER_TOKEN = 1
    ops = [proposed(ovs, run_id, f"note-{n}")["id"] for n in range(2)]
    aovs = client_for(live_server, client_token, AsyncOversight, retries=0, max_waits=None)

    async def wait_for_both() -> list:
        waits = (aovs.wait(op, timeout=3) for op in ops)
        return await asyncio.gather(*waits, return_exceptions=True)

    outcomes = asyncio.run(wait_for_both())
    assert [type(outcome) for outcome in outcomes] == [WaitTimedOut, WaitTimedOut]
    assert [status("note-0"), status("note-1")] == ["cancelled", "cancelled"]


def test_a_cancelled_async_tool_withdraws_its_proposal_but_not_its_execution(
    live_server, client_token, run_id, reviewer
):
    aovs = client_for(live_server, client_token, AsyncOversight)
    running: list[str] = []
    started = asyncio.Event()

    @aovs.tool(**NOTE, verify=lambda arguments, key: "absent")
    async def append_note(line: str, *, idempotency_key: str) -> None:
        running.append(line)
        started.set()
        await asyncio.Event().wait()  # Runs until cancelled.

    async def impatient() -> None:
        await asyncio.wait_for(append_note(run_id, "note-1", line="paid"), 2)

    with pytest.raises(TimeoutError):
        asyncio.run(impatient())
    assert (status("note-1"), running) == ("cancelled", [])

    async def cancelled_while_running() -> None:
        task = asyncio.create_task(append_note(run_id, "note-2", line="sent"))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    approve = reviewing(
        Operation.objects.filter(call_id="note-2", status="proposed").first,
        lambda op: decide_on(op, reviewer),
        "operation note-2",
    )
    with approve:
        asyncio.run(cancelled_while_running())
    assert (status("note-2"), running) == ("in_flight", ["sent"])


class SlowProposals(FlakyProxy):
    """Relays to the live server, but holds the answer to a proposal for 3 seconds (one
    connection at a time: the requests after it wait meanwhile)."""

    def _relay(self, client: socket.socket) -> None:
        request = read_request(client)
        response = self.forward(request)
        if re.match(rb"POST \S+/operations ", request):
            time.sleep(3)  # simulates a slow target
        with suppress(OSError):  # the client may have gone
            client.sendall(response)


def test_a_tool_cancelled_while_proposing_withdraws_what_got_through(
    live_server, client_token, run_id
):
    proxy = SlowProposals(live_server.url)
    try:
        aovs = AsyncOversight(proxy.url, client_token, timeout=10, backoff=0.01)

        @aovs.tool(**NOTE, verify=lambda arguments, key: "absent")
        async def append_note(line: str, *, idempotency_key: str) -> None:
            raise AssertionError("never approved, never run")

        with pytest.raises(TimeoutError):
            asyncio.run(asyncio.wait_for(append_note(run_id, "note-1", line="paid"), 1))
    finally:
        proxy.close()
    assert status("note-1") == "cancelled"


class PortalProxy(FlakyProxy):
    """Relays to the live server, but answers every long poll with a login page (say,
    a proxy whose session ran out while the agent waited)."""

    def _relay(self, client: socket.socket) -> None:
        request = read_request(client)
        if re.search(rb"[?&]wait=[1-9]", request.partition(b"\r\n")[0]):
            head = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n"
            client.sendall(head % len(LOGIN_PAGE) + LOGIN_PAGE)
        else:
            client.sendall(self.forward(request))


def test_a_wait_ended_by_an_unexpected_answer_withdraws_first(
    live_server, client_token, ovs, run_id
):
    op = proposed(ovs, run_id)
    proxy = PortalProxy(live_server.url)
    try:
        behind = Oversight(proxy.url, client_token, timeout=10, backoff=0.01)
        with pytest.raises(InvalidResponse) as garbled:
            behind.wait(op["id"], timeout=60)
    finally:
        proxy.close()
    assert "Please log in" in garbled.value.detail
    assert Operation.objects.get(pk=op["id"]).status == "cancelled"


# --- the server's longest long poll -----------------------------------------------------


@pytest.mark.parametrize("cls", CLIENTS)
def test_long_polls_keep_within_the_servers_longest_wait(
    settings, live_server, client_token, ovs, run_id, reviewer, cls
):
    """A server allowing 10-second long polls (30 by default) refuses longer ones: the
    client polls for 10 seconds at a time instead."""
    settings.OVERSIGHT_API_MAX_WAIT_SECONDS = 10
    client = client_for(live_server, client_token, cls)
    op = proposed(ovs, run_id)

    def approve_while_it_long_polls(found: Operation) -> None:
        until_long_polls_wait(1)
        decide_on(found, reviewer)

    proposal = Operation.objects.filter(pk=op["id"], status="proposed").first
    with reviewing(proposal, approve_while_it_long_polls, "the proposal"):
        waited = drive(client.wait(op["id"], timeout=60))
    assert waited["status"] == "approved"
    assert first_event(client)["seq"] == 1


def first_event(client: Oversight | AsyncOversight) -> dict:
    """The first event of the token's feed, read as ``events()`` reads it (wait=30)."""
    events = client.events()
    if not inspect.isasyncgen(events):
        return next(events)

    async def first() -> dict:
        try:
            return await anext(events)
        finally:
            await events.aclose()

    return asyncio.run(first())


# --- a proposal repeated after a restart -------------------------------------------------


def test_a_proposal_repeated_under_its_key_after_a_restart_is_the_same_operation(
    live_server, client_token, ovs, run_id
):
    """The caller's key names the proposal, not one request: repeated by a restarted
    process (the run has moved on since), it returns the operation proposed before."""
    key = "thread-7:step-3"
    first = proposed(client_for(live_server, client_token), run_id, idempotency_key=key)
    ovs.upload_artifact(run_id, "moved-on.txt", b"the run moved on")
    restarted = client_for(live_server, client_token)
    assert proposed(restarted, run_id, idempotency_key=key)["id"] == first["id"]
    assert proposed(restarted, run_id, idempotency_key=key)["id"] == first["id"]
    assert Operation.objects.count() == 1


class FailingProxy(FlakyProxy):
    """Relays to the live server, but answers the first POST, which the server made,
    with a server error page: a server, or a proxy, that failed after the commit."""

    def _relay(self, client: socket.socket) -> None:
        request = read_request(client)
        response = self.forward(request)
        first_post = request.startswith(b"POST") and not self.posts
        if request.startswith(b"POST"):
            self.posts.append(request)
        client.sendall(SERVER_ERROR if first_post else response)


@pytest.mark.parametrize("cls", CLIENTS)
def test_a_proposal_answered_with_a_server_error_is_sent_again_and_made_once(
    live_server, client_token, run_id, cls
):
    """A 500 to a write under an Idempotency-Key (any 5xx, not only a 503) is sent
    again with its key: the server answers with the operation it made the first time."""
    proxy = FailingProxy(live_server.url)
    try:
        client = cls(proxy.url, client_token, timeout=10, backoff=0.01)
        op = drive(client.propose(run_id, "note-1", arguments={"line": "paid"}, **NOTE))
    finally:
        proxy.close()
    assert len(proxy.posts) == 2
    assert proxy.keys()[0] == proxy.keys()[1] != ""
    assert list(Operation.objects.values_list("pk", flat=True)) == [op["id"]]


# --- a host with more than one address ---------------------------------------------------


def test_the_async_client_tries_each_address_of_the_host(
    monkeypatch, live_server, client_token, run_id
):
    """``localhost`` resolving to ::1 first while the server listens on 127.0.0.1 only:
    the async client connects to the second address, as the sync client does."""
    port = int(live_server.url.rpartition(":")[2])
    resolve = socket.getaddrinfo

    def ipv6_first(host: str, *args: Any, **kwargs: Any) -> list:
        if host != "localhost":
            return resolve(host, *args, **kwargs)
        return [
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", port, 0, 0)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port)),
        ]

    monkeypatch.setattr(socket, "getaddrinfo", ipv6_first)
    aovs = AsyncOversight(f"http://localhost:{port}", client_token, retries=0)
    assert asyncio.run(aovs.run(run_id))["id"] == run_id


# --- answers cut short, not JSON, or too many at once -------------------------------------


class Scripted:
    """A raw HTTP server answering each connection, in turn, with the next of
    ``answers`` (bytes, sent as they are), then closing it."""

    def __init__(self, *answers: bytes) -> None:
        self.answers = list(answers)
        self.requests: list[bytes] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with self.listener:
            while self.answers:
                connection, _ = self.listener.accept()
                with connection:
                    self.requests.append(read_request(connection))
                    connection.sendall(self.answers.pop(0))


def answer(body: bytes, *headers: str) -> bytes:
    return "\r\n".join(["HTTP/1.1 200 OK", *headers, "", ""]).encode() + body


@pytest.mark.parametrize("cls", CLIENTS)
def test_a_chunked_answer_cut_at_a_chunk_boundary_is_sent_again(cls):
    """The connection closes where the next chunk's size is due: the answer is
    incomplete, so the request is sent again (not the half read as the whole)."""
    server = Scripted(
        answer(b'7\r\n{"id": \r\n', "Transfer-Encoding: chunked"),
        answer(b'7\r\n{"id": \r\n2\r\n7}\r\n0\r\n\r\n', "Transfer-Encoding: chunked"),
    )
    client = cls(server.url, "ovs_token", retries=2, backoff=0.01)
    assert drive(client.run(7)) == {"id": 7}
    assert len(server.requests) == 2


@pytest.mark.parametrize("cls", CLIENTS)
def test_an_answer_cut_in_its_headers_is_sent_again(cls):
    """The connection closes in the middle of the headers (Oversight, or a proxy,
    went away as it answered): incomplete, so sent again, not read as an empty answer
    (the soak's outage found the async client raising ``InvalidResponse``)."""
    server = Scripted(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n",
        answer(b'{"id": 7}', "Content-Length: 9"),
    )
    client = cls(server.url, "ovs_token", retries=2, backoff=0.01)
    assert drive(client.run(7)) == {"id": 7}
    assert len(server.requests) == 2


@pytest.mark.parametrize("cls", CLIENTS)
def test_a_body_the_server_timed_out_on_is_sent_again(cls):
    """A 408: the server did not get the whole body in time (``OVERSIGHT_WEB_BODY_SECONDS``,
    a slow link) and acted on none of it, so the request goes again, under its key."""
    timed_out = b'{"error": "request_timeout", "detail": "late", "field": null}'
    server = Scripted(
        answer(timed_out, f"Content-Length: {len(timed_out)}").replace(
            b"200 OK", b"408 Request Timeout"
        ),
        answer(b'{"id": 7}', "Content-Length: 9"),
    )
    client = cls(server.url, "ovs_token", retries=2, backoff=0.01)
    assert drive(client.run(7)) == {"id": 7}
    assert len(server.requests) == 2


@pytest.mark.parametrize("cls", CLIENTS)
def test_an_answer_that_is_not_json_is_a_typed_error(cls):
    server = Scripted(answer(LOGIN_PAGE, f"Content-Length: {len(LOGIN_PAGE)}"))
    client = cls(server.url, "ovs_token", retries=0)
    with pytest.raises(InvalidResponse) as garbled:
        drive(client.run(7))
    assert (garbled.value.status, garbled.value.code) == (200, "invalid_response")
    assert "the answer is not JSON: '<html><body>Please log in" in garbled.value.detail


@contextmanager
def counting_long_polls() -> Iterator[tuple[str, list[int]]]:
    """A server whose long polls take half a second: its URL, and how many it held at
    once, at most (``peak[0]``)."""
    lock, now, peak = threading.Lock(), [0], [0]

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with lock:
                now[0] += 1
                peak[0] = max(peak[0], now[0])
            time.sleep(0.5)  # simulates a slow target
            with lock:
                now[0] -= 1
            self.send_response(200)
            self.send_header("Content-Length", "9")
            self.end_headers()
            self.wfile.write(b'{"id": 1}')

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    server.request_queue_size = 32
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", peak
    finally:
        server.shutdown()
        server.server_close()


def at_once(client: Oversight | AsyncOversight, count: int, call: Callable[[], Any]) -> list:
    """``call()`` ``count`` times at once: tasks of one event loop, or threads."""
    if isinstance(client, AsyncOversight):

        async def gathered() -> list:
            return await asyncio.gather(*(call() for _ in range(count)))

        return asyncio.run(gathered())
    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(lambda _: call(), range(count)))


@pytest.mark.parametrize("cls", CLIENTS)
def test_a_client_sends_at_most_max_waits_long_polls_at_once(cls):
    """Ten waits of a client capped at three: three long polls at a time reach the
    server (the others queue in the client instead of being refused with 429s)."""
    with counting_long_polls() as (url, peak):
        client = cls(url, "ovs_token", max_waits=3)
        answers = at_once(client, 10, lambda: client.operation(1, wait=5))
    assert answers == [{"id": 1}] * 10
    assert peak[0] == 3
