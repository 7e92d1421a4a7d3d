"""The async client (``oversight_client.AsyncOversight``) against a live server: the same
methods as coroutines, async tools, requests and the feed, many waits on one event loop
without a thread each, and the same retries over its own HTTP/1.1 transport."""

import asyncio
import http.server
import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from oversight_client import (
    AsyncOversight,
    NotFound,
    Oversight,
    Rejected,
    Unreachable,
    VerificationFailed,
    WaitTimedOut,
)
from runs.models import Message, Operation
from tests.client_helpers import NOTE, answering, client_for, deciding
from tests.helpers import decide_on
from tests.processes import ROOT
from tests.test_api_waits import until_long_polls_wait
from tests.test_client import FlakyProxy

pytest_plugins = ["tests.client_helpers", "tests.ports"]


@pytest.fixture
def run_id(aovs) -> int:
    async def start() -> int:
        session = await aovs.open_session(title="Async tests", external_id="thread-a")
        again = await aovs.open_session(title="Async tests", external_id="thread-a")
        assert again["id"] == session["id"]
        return (await aovs.start_run(session["id"], goal="Keep the notes"))["id"]

    return asyncio.run(start())


def test_an_async_tool_runs_once_with_async_verify(aovs, run_id, reviewer, tmp_path):
    notes = tmp_path / "notes.md"
    calls = []

    async def landed(arguments: dict, key: str) -> bool:
        await asyncio.sleep(0)
        return f"{arguments['line']} [{key}]" in notes.read_text()

    @aovs.tool(**NOTE, verify=landed)
    async def append_note(line: str, *, idempotency_key: str) -> dict:
        calls.append(idempotency_key)
        await asyncio.sleep(0)
        with notes.open("a") as handle:
            handle.write(f"{line} [{idempotency_key}]\n")
        return {"appended": line}

    async def twice() -> tuple:
        return (
            await append_note(run_id, "note-1", line="paid"),
            await append_note(run_id, "note-1", line="paid"),
        )

    with deciding(reviewer, "note-1"):
        first, again = asyncio.run(twice())
    assert first == again == {"appended": "paid"}
    op = Operation.objects.get(call_id="note-1")
    assert (op.status, calls) == ("committed", [op.idempotency_key])


def test_an_async_undo_runs_when_the_effect_is_uncertain(aovs, run_id, reviewer):
    undone = []

    async def undo(arguments: dict, key: str) -> None:
        undone.append(key)

    @aovs.tool(**NOTE, verify=lambda arguments, key: "uncertain", undo=undo)
    def append_note(line: str, *, idempotency_key: str) -> None:
        pass  # a plain function works in the async client too

    with deciding(reviewer, "note-1"), pytest.raises(VerificationFailed) as failed:
        asyncio.run(append_note(run_id, "note-1", line="paid"))
    assert failed.value.outcome == "rolled_back"
    assert undone == [Operation.objects.get(call_id="note-1").idempotency_key]


def test_the_sync_client_refuses_an_async_tool(live_server, client_token):
    ovs = client_for(live_server, client_token)

    async def append_note(line: str, *, idempotency_key: str) -> None:
        pass

    with pytest.raises(TypeError, match="append_note is async: use AsyncOversight"):
        ovs.tool(**NOTE, verify=lambda arguments, key: True)(append_note)


def test_requests_and_the_feed_are_awaited(aovs, run_id, reviewer):
    async def ask_and_follow() -> tuple[dict, dict]:
        asked = await aovs.ask(run_id, "Which account?", choices=["a", "b"], external_id="q")
        async for event in aovs.events(wait=5):
            if event["request"] == asked["id"] and event["to_status"] == "answered":
                return await aovs.request(asked["id"]), event
        raise AssertionError("the feed ended")

    with answering(reviewer, "choose", data="b", comment="b is cheaper"):
        request, event = asyncio.run(ask_and_follow())
    assert request["answer"]["data"] == "b"
    assert (event["request_external_id"], event["actor"]) == ("q", "reviewer")

    async def rejected() -> None:
        asked = await aovs.ask(run_id, "Sign off?")
        await aovs.answer(asked["id"], timeout=20)

    with answering(reviewer, "reject", comment="not yet"), pytest.raises(Rejected) as no:
        asyncio.run(rejected())
    assert no.value.reason == "not yet"


def test_an_async_wait_fails_closed(aovs, run_id):
    async def propose_and_wait() -> None:
        op = await aovs.propose(run_id, "note-1", arguments={"line": "x"}, **NOTE)
        await aovs.wait(op["id"], timeout=1)

    with pytest.raises(WaitTimedOut) as timed_out:
        asyncio.run(propose_and_wait())
    assert timed_out.value.operation["status"] == "cancelled"
    assert Operation.objects.get(call_id="note-1").status == "cancelled"


def test_errors_are_typed_and_lost_responses_replayed(aovs, live_server, client_token, run_id):
    with pytest.raises(NotFound):
        asyncio.run(aovs.run(run_id + 1000))
    proxy = FlakyProxy(live_server.url, "response")
    try:
        flaky = AsyncOversight(proxy.url, client_token, timeout=10, backoff=0.01)
        assert asyncio.run(flaky.message(run_id, "said once")) == 1
    finally:
        proxy.close()
    assert proxy.keys()[0] == proxy.keys()[1] != ""
    assert Message.objects.filter(run_id=run_id).count() == 1


def test_an_unreachable_server_raises_after_the_retries(client_token, refused_port):
    dead = AsyncOversight(f"http://127.0.0.1:{refused_port}", client_token, retries=2, backoff=0.01)
    with pytest.raises(Unreachable):
        asyncio.run(dead.open_session())


def test_a_429_is_waited_out_and_a_chunked_answer_read(client_token):
    """Over its own transport: Retry-After honoured, a chunked body reassembled."""
    arrivals: list[float] = []

    class Busy(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            arrivals.append(time.monotonic())
            if len(arrivals) == 1:
                body = b'{"error": "too_many_waits", "detail": "busy"}'
                self.send_response(429)
                self.send_header("Retry-After", "1")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for chunk in (b'{"id": ', b"7}"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.write(b"0\r\n\r\n")

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Busy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = AsyncOversight(f"http://127.0.0.1:{server.server_port}", client_token)
        assert asyncio.run(client.run(7)) == {"id": 7}
    finally:
        server.shutdown()
        server.server_close()
    assert len(arrivals) == 2 and arrivals[1] - arrivals[0] >= 1


WAITING_AGENT = textwrap.dedent(
    """
    import asyncio, json, sys, threading
    from oversight_client import AsyncOversight

    async def main(base, token, ids):
        ovs = AsyncOversight(base, token, timeout=10, backoff=0.01, max_waits=None)
        await ovs.operation(ids[0])  # connected once: the host name is resolved
        before = threading.active_count()
        waits = [asyncio.create_task(ovs.wait(op, timeout=120)) for op in ids]
        # The test says "go" once the server holds every wait; read on the loop, with
        # no thread of its own.
        told = asyncio.StreamReader()
        protocol = asyncio.StreamReaderProtocol(told)
        await asyncio.get_running_loop().connect_read_pipe(lambda: protocol, sys.stdin)
        await told.readline()
        print("waiting", before, threading.active_count(), flush=True)
        settled = await asyncio.gather(*waits)
        print(json.dumps([op["status"] for op in settled]), threading.active_count(), flush=True)

    asyncio.run(main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3])))
    """
)
WAITS = 30


def test_many_waits_share_one_thread(settings, live_server, client_token, run_id, reviewer):
    """An agent process waits on 30 decisions at once on one event loop: no thread is
    started for them (the sync client would need 30)."""
    settings.OVERSIGHT_API_MAX_WAITS_PER_TOKEN = settings.OVERSIGHT_API_MAX_WAITS = WAITS + 5
    ovs = client_for(live_server, client_token, Oversight)
    ops = [ovs.propose(run_id, f"c-{n}", arguments={"n": n}, **NOTE)["id"] for n in range(WAITS)]
    agent = subprocess.Popen(
        [sys.executable, "-c", WAITING_AGENT, live_server.url, client_token, json.dumps(ops)],
        cwd=Path(ROOT),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        until_long_polls_wait(WAITS)
        agent.stdin.write("go\n")
        agent.stdin.flush()
        waiting = agent.stdout.readline().split()
        assert waiting[0] == "waiting", agent.stderr.read()
        assert waiting[1] == waiting[2], f"threads before and while waiting: {waiting[1:]}"
        for op in Operation.objects.filter(pk__in=ops):
            decide_on(op, reviewer)
        statuses, threads = agent.stdout.readline().rsplit(" ", 1)
        assert json.loads(statuses) == ["approved"] * WAITS
        assert threads.strip() == waiting[1]
    finally:
        agent.kill()
        agent.wait(timeout=10)
