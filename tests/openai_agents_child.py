"""The example OpenAI Agents SDK agent as a child process (``python
tests/openai_agents_child.py URL RUN --state DIR``), with a short lease, killed (exit
code 9) at a chosen point the first time it gets there (the file named by the variable
records that it happened):

- ``CRASH_AFTER_EFFECT``: right after the first payment is written to the ledger, before
  it is reported;
- ``CRASH_AFTER_PROPOSAL``: right after the first proposal, before the paused run's
  state is stored."""

import asyncio
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import openai_agents_agent as example

from oversight_client.aio import AsyncOversight

example.LEASE_SECONDS = 2
record, propose = example.record, AsyncOversight.propose


def die_once(variable: str, said: str) -> None:
    marker = os.environ.get(variable)
    if marker and not Path(marker).exists():
        Path(marker).write_text(said)
        os._exit(9)


def record_then_die(ledger: Path, line: str) -> None:
    record(ledger, line)
    die_once("CRASH_AFTER_EFFECT", line)


async def propose_then_die(self, run_id: int, call_id: str, *args, **kwargs) -> dict:
    operation = await propose(self, run_id, call_id, *args, **kwargs)
    die_once("CRASH_AFTER_PROPOSAL", call_id)
    return operation


example.record = record_then_die
AsyncOversight.propose = propose_then_die
asyncio.run(example.main())
