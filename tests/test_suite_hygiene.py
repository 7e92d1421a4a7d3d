"""The suite waits for what it waits for (#40): no fixed pause stands in for another
process or thread getting somewhere, as one that is long enough on a quiet machine is
too short on a loaded one. A test waits for the condition itself (``wait_until``, an
event, a line a child prints). A pause that simulates a slow target says so on its line;
the few others are listed here, each with its reason."""

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PAUSE = re.compile(r"\b(?:time|asyncio)\.sleep\(|\bfrom (?:time|asyncio) import .*\bsleep\b")
SLOW_TARGET = "# simulates a slow target"
# (file, its line as written): why it may pause.
ALLOWED = {
    ("processes.py", "time.sleep(POLL_SECONDS)"): (
        "wait_until's interval between two looks at the condition it waits for"
    ),
    (
        "test_supervisor.py",
        '"    time.sleep(STARTUP_GRACE_SECONDS + 0.5)  # dies after its start-up grace\\n"',
    ): "a child that outlives the supervisor's start-up grace, then dies: what is tested",
    ("test_client_async.py", "await asyncio.sleep(0)"): (
        "yields to the event loop once, so that an async tool really awaits: waits for nothing"
    ),
    ("test_claude_agent.py", "await asyncio.sleep(6)  # a payment system that takes its time"): (
        "a tool that runs past the agent's quiet_seconds, as the CLI says nothing meanwhile: "
        "what is tested"
    ),
}


def lines() -> list[tuple[Path, int, str]]:
    """Every line of tests/ but this file's: its file, number and text."""
    return [
        (path, number, line)
        for path in sorted(TESTS.rglob("*.py"))
        if path != Path(__file__).resolve()
        for number, line in enumerate(path.read_text().splitlines(), 1)
    ]


def test_no_test_pauses_to_wait_for_another_process_or_thread():
    unexplained = [
        f"{path.relative_to(TESTS.parent)}:{number}: {line.strip()}"
        for path, number, line in lines()
        if PAUSE.search(line)
        and SLOW_TARGET not in line
        and (path.name, line.strip()) not in ALLOWED
    ]
    assert unexplained == [], "wait for the condition itself (tests/processes.py: wait_until)"


def test_every_allowed_pause_is_still_there():
    """An allowance outliving its pause would let a new one in unseen."""
    assert set(ALLOWED) <= {(path.name, line.strip()) for path, _, line in lines()}
