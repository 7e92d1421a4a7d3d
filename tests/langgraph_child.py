"""The example LangGraph agent as a child process (``python tests/langgraph_child.py URL
THREAD --state DIR``), with a short lease; with ``CRASH_AFTER_EFFECT`` set, the first
payment kills the process right after it is written to the ledger, before it is
reported (the file named by that variable records that it happened)."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import langgraph_agent as example

example.LEASE_SECONDS = 2
marker = os.environ.get("CRASH_AFTER_EFFECT")
record = example.record


def record_then_die(ledger: Path, line: str) -> None:
    record(ledger, line)
    if marker and not Path(marker).exists():
        Path(marker).write_text(line)
        os._exit(9)


example.record = record_then_die
example.main()
