"""The demo's supervisor, with real child processes. The supervisor runs in a process of
its own (``tests/supervisor_child.py``): the SIGTERM that stops it goes to that process,
never to the test run."""

import json
import signal
import subprocess
import sys

from tests.processes import ROOT, Output, wait_until

# A child that runs until it is stopped, holding no timer.
RUNS_UNTIL_STOPPED = "import signal; signal.pause()"


def supervising(*children: tuple[str, str, bool]) -> tuple[subprocess.Popen, Output]:
    """The supervisor of ``children`` (name, Python code, once), started; what it says."""
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "tests.supervisor_child", json.dumps(children)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return supervisor, Output(supervisor.stdout)


def stopped(supervisor: subprocess.Popen, said: Output) -> list[str]:
    """SIGTERM to the supervisor's process; everything it said, once it has exited."""
    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(timeout=60) == 0, supervisor.stderr.read()
    return said.text().splitlines()


def test_child_dying_at_start_stops_with_one_clear_line():
    supervisor, said = supervising(("web", "raise SystemExit(3)", False))
    assert supervisor.wait(timeout=60) == 0, supervisor.stderr.read()
    assert said.text().splitlines() == [
        "error: web stopped right after starting (exit code 3)",
        "exit 1",
        "web 3",
    ]


def test_child_dying_later_is_restarted_and_sigterm_stops_everything(tmp_path):
    marker = tmp_path / "starts"
    code = (
        "import pathlib, signal, time\n"
        "from runs.supervisor import STARTUP_GRACE_SECONDS\n"
        f"p = pathlib.Path({str(marker)!r})\n"
        "starts = p.read_text() + 'x' if p.exists() else 'x'\n"
        "p.write_text(starts)\n"
        "if starts == 'x':\n"
        "    time.sleep(STARTUP_GRACE_SECONDS + 0.5)  # dies after its start-up grace\n"
        "else:\n"
        f"    {RUNS_UNTIL_STOPPED}\n"
    )
    supervisor, said = supervising(("worker", code, False))
    said.wait_for("restarting it", supervisor)
    wait_until(lambda: marker.read_text() == "xx", message="the worker's second start")
    assert stopped(supervisor, said) == [
        "worker exited with code 0; restarting it",
        "exit 0",
        f"worker {-signal.SIGTERM}",
    ]


def test_a_child_whose_work_ends_is_not_restarted_and_the_others_go_on():
    supervisor, said = supervising(
        ("agent", "raise SystemExit(0)", True), ("web", RUNS_UNTIL_STOPPED, False)
    )
    said.wait_for("agent finished", supervisor)
    assert stopped(supervisor, said) == [
        "agent finished",
        "exit 0",
        "agent 0",
        f"web {-signal.SIGTERM}",
    ]
