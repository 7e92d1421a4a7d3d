"""The example LangGraph agent as a child process (``python tests/langgraph_child.py URL
THREAD --state DIR``), with a short lease, killed (exit code 9) at a chosen point the
first time it gets there (the file named by the variable records that it happened):

- ``CRASH_AFTER_EFFECT``: right after the first payment is written to the ledger, before
  it is reported;
- ``CRASH_AFTER_PROPOSAL``: right after the tool node's first proposal, before the
  thread's pause is checkpointed."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import langgraph_agent as example

from oversight_client.langgraph.tools import SupervisedTool

example.LEASE_SECONDS = 2


def die_once(variable: str, said: str) -> None:
    marker = os.environ.get(variable)
    if marker and not Path(marker).exists():
        Path(marker).write_text(said)
        os._exit(9)


record, propose = example.record, SupervisedTool.propose


def record_then_die(ledger: Path, line: str) -> None:
    record(ledger, line)
    die_once("CRASH_AFTER_EFFECT", line)


def propose_then_die(self, run_id: int, call_id: str, arguments: dict) -> dict:
    operation = propose(self, run_id, call_id, arguments)
    die_once("CRASH_AFTER_PROPOSAL", call_id)
    return operation


example.record = record_then_die
SupervisedTool.propose = propose_then_die
example.main()
