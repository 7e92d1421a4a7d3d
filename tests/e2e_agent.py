"""An agent for the end-to-end test: plain Python with only ``oversight_client``, run
as its own process. It walks one run through approve, server-side commit, reply,
edit-and-approve, expiry and cancel, printing a line per step. Started again with the
same state file, it resumes the run instead of starting a new one.

    python tests/e2e_agent.py BASE_URL STATE_DIR      (token in OVERSIGHT_AGENT_TOKEN)
"""

import json
import os
import sys
from pathlib import Path

from oversight_client import Cancelled, Expired, Observed, Oversight, Rejected

base_url, state_dir = sys.argv[1], Path(sys.argv[2])
client = Oversight(base_url, os.environ["OVERSIGHT_AGENT_TOKEN"])
notes = state_dir / "notes.txt"
state = state_dir / "run.json"


def say(line: str) -> None:
    print(line, flush=True)


def noted(arguments: dict, key: str) -> Observed | bool:
    """Applied, with what the call returns, if the line is there; else uncertain."""
    line = f"{arguments['line']} [{key}]"
    if notes.exists() and line in notes.read_text().splitlines():
        return Observed("applied", output={"appended": arguments["line"]})
    return False


@client.tool(action="notes.append", rollback_kind="in_band", verify=noted, lease_seconds=2)
def append_note(line: str, *, idempotency_key: str) -> dict:
    with notes.open("a") as handle:
        handle.write(f"{line} [{idempotency_key}]\n")
    say(f"fired {line}")
    if os.environ.get("DIE_AFTER_EFFECT") == line:
        os.kill(os.getpid(), 9)  # Killed after the effect, before the report.
    return {"appended": line}


if state.exists():
    run_id = json.loads(state.read_text())["run"]
    say(f"resumed {client.resume(run_id).case}")
else:
    session = client.open_session(title="e2e")
    run_id = client.start_run(session["id"], goal="Keep the notes up to date")["id"]
    state.write_text(json.dumps({"run": run_id}))
    say(f"started {run_id}")

say(f"approved {append_note(run_id, 'a', line='first')}")
written = client.wait(
    client.propose(
        run_id,
        "file",
        "file.write",
        {"path": "e2e.txt", "content": "hello", "expected_sha256": None},
        rollback_kind="in_band",
    )["id"]
)
say(f"server {written['status']}")
try:
    append_note(run_id, "b", line="second")
except Rejected as no:
    say(f"reply {no.reply}")
say(f"edited {append_note(run_id, 'c', line='third')}")
try:
    append_note(run_id, "d", line="fourth")
except Expired:
    say("expired")
try:
    append_note(run_id, "e", line="fifth")
except Cancelled:
    say("cancelled")
