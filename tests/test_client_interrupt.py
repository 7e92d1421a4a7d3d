"""Ctrl-C during a wait withdraws the proposal: an agent process (the sync client, and
the async one under ``asyncio.run``) proposes, waits for a decision, and is sent SIGINT
while its long poll is on the server. The operation ends cancelled (it can never be
approved and fire), and the interruption goes on: the agent dies of it."""

import signal
import subprocess
import sys

import pytest

from runs.models import Operation
from tests.processes import ROOT, Output

pytest_plugins = ["tests.client_helpers"]

# The agent says WAITING as its long poll leaves (the client's transport is only
# watched), so that the signal arrives while the wait is on.
AGENT = """
import asyncio, sys
from oversight_client import AsyncOversight, Oversight
from oversight_client.transport import StreamTransport, UrllibTransport

def telling(exchange):
    def watched(self, request):
        if request.long_poll:
            print("WAITING", flush=True)
        return exchange(self, request)
    return watched

UrllibTransport.exchange = telling(UrllibTransport.exchange)
StreamTransport.exchange = telling(StreamTransport.exchange)
url, token, run_id, kind = sys.argv[1:]
note = {"action": "notes.append", "rollback_kind": "in_band", "arguments": {"line": "paid"}}
if kind == "sync":
    ovs = Oversight(url, token)
    op = ovs.propose(int(run_id), "note-1", **note)
    print("PROPOSED", op["id"], flush=True)
    ovs.wait(op["id"])
else:
    async def main():
        ovs = AsyncOversight(url, token)
        op = await ovs.propose(int(run_id), "note-1", **note)
        print("PROPOSED", op["id"], flush=True)
        await ovs.wait(op["id"])
    asyncio.run(main())
print("DECIDED", flush=True)
"""


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_ctrl_c_during_a_wait_withdraws_the_proposal(live_server, client_token, run_id, kind):
    agent = subprocess.Popen(
        [sys.executable, "-c", AGENT, live_server.url, client_token, str(run_id), kind],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    said = Output(agent.stdout)
    try:
        op_id = int(said.wait_for(r"^PROPOSED (\d+)$", agent)[1])
        said.wait_for("^WAITING$", agent)
        agent.send_signal(signal.SIGINT)
        agent.wait(timeout=60)
    finally:
        agent.kill()
        agent.wait(timeout=30)

    err = agent.stderr.read()
    assert agent.returncode == -signal.SIGINT, err
    assert "KeyboardInterrupt" in err and "DECIDED" not in said.text()
    withdrawn = Operation.objects.get(pk=op_id)
    # asyncio.run cancels the waiting task on Ctrl-C, then raises KeyboardInterrupt.
    cause = {"sync": "KeyboardInterrupt", "async": "CancelledError"}[kind]
    assert (withdrawn.status, withdrawn.status_reason) == (
        "cancelled",
        f"the agent stopped waiting: {cause}",
    )
