"""The paying agent's workflow as a child process (``python tests/agent_framework_child.py
URL RUN_ID --state DIR [--start] [--three]``): with ``--start`` it starts the workflow in run
RUN_ID, then follows the feed (its cursor and ledger in DIR) until the workflow ends,
saying so on stdout, and completes the run. With ``--three`` the model makes three calls
in its turn, else one. With ``CRASH_AFTER_EFFECT`` naming a file that does not exist
yet, it kills itself (SIGKILL) right after its first payment is written to the ledger,
before it is reported, and writes the payment to that file. Its lease is short, for the
restart to take over."""

import argparse
import asyncio
import os
import signal
from pathlib import Path

from oversight_client import AsyncOversight
from oversight_client.agent_framework import WorkflowDriver
from oversight_client.cursor import FileCursor
from tests import agent_framework_helpers as helpers

record = helpers.record


def record_then_die(ledger: Path, line: str) -> None:
    record(ledger, line)
    marker = os.environ.get("CRASH_AFTER_EFFECT")
    if marker and not Path(marker).exists():
        Path(marker).write_text(line)
        os.kill(os.getpid(), signal.SIGKILL)


async def main(url: str, run_id: int, folder: Path, start: bool, calls: list) -> None:
    ovs = AsyncOversight(url, os.environ["OVERSIGHT_TOKEN"], timeout=10, backoff=0.05)
    tool = helpers.paying_tool(ovs, folder / "ledger", lease_seconds=2)
    cursor = FileCursor(folder / "cursor")
    driver = WorkflowDriver(
        lambda: helpers.paying_workflow(tool, calls), ovs, tools=[tool], cursor=cursor
    )
    if start and await driver.start("Pay INV-7", run_id) is None:
        print("waiting for reviewers", flush=True)
    await driver.follow(stop=lambda: run_id in driver.outputs or run_id in driver.failed, wait=2)
    print(f"Done: {helpers.said(driver.outputs[run_id])}", flush=True)
    await ovs.finish(run_id, "completed")


helpers.record = record_then_die
parser = argparse.ArgumentParser()
parser.add_argument("url")
parser.add_argument("run_id", type=int)
parser.add_argument("--state", type=Path, required=True)
parser.add_argument("--start", action="store_true")
parser.add_argument("--three", action="store_true")
given = parser.parse_args()
calls = helpers.THREE if given.three else [helpers.PAY]
asyncio.run(main(given.url, given.run_id, given.state, given.start, calls))
