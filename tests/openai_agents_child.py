"""The example OpenAI Agents SDK agent as a child process (``python
tests/openai_agents_child.py URL RUN --state DIR``), with a short lease, killed (exit
code 9) right after its first payment is written to the ledger, before it is reported,
the first time it gets there, if ``CRASH_AFTER_EFFECT`` names a file (which records that
it happened)."""

import asyncio
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import openai_agents_agent as example

example.LEASE_SECONDS = 2
record = example.record


def record_then_die(ledger: Path, line: str) -> None:
    record(ledger, line)
    marker = os.environ.get("CRASH_AFTER_EFFECT")
    if marker and not Path(marker).exists():
        Path(marker).write_text(line)
        os._exit(9)


example.record = record_then_die
asyncio.run(example.main())
