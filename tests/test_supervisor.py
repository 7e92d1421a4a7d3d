"""The demo's supervisor, with real child processes."""

import os
import signal
import sys
import threading
import time

from runs.supervisor import Child, Supervisor


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def run_until_sigterm(supervisor: Supervisor, after: float) -> int:
    """Run the supervisor until this process gets SIGTERM, ``after`` seconds from now."""
    threading.Timer(after, os.kill, (os.getpid(), signal.SIGTERM)).start()
    previous = signal.getsignal(signal.SIGTERM)
    try:
        return supervisor.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, signal.default_int_handler)


def test_child_dying_at_start_stops_with_one_clear_line():
    lines = []
    supervisor = Supervisor([Child("web", python("raise SystemExit(3)"))], write=lines.append)
    assert supervisor.run() == 1
    assert lines == ["error: web stopped right after starting (exit code 3)"]


def test_child_dying_later_is_restarted_and_sigterm_stops_everything(tmp_path):
    marker = tmp_path / "starts"
    code = (
        "import time, pathlib\n"
        f"p = pathlib.Path({str(marker)!r})\n"
        "p.write_text(p.read_text() + 'x' if p.exists() else 'x')\n"
        "time.sleep(3.5)\n"
    )
    lines = []
    child = Child("worker", python(code))
    started = time.monotonic()
    assert run_until_sigterm(Supervisor([child], write=lines.append), after=5.5) == 0
    assert marker.read_text() == "xx"
    assert lines == ["worker exited with code 0; restarting it"]
    assert child.process.poll() is not None
    assert time.monotonic() - started < 15


def test_a_child_whose_work_ends_is_not_restarted_and_the_others_go_on():
    lines = []
    done = Child("agent", python("raise SystemExit(0)"), once=True)
    server = Child("web", python("import time; time.sleep(60)"))
    assert run_until_sigterm(Supervisor([done, server], write=lines.append), after=1.5) == 0
    assert lines == ["agent finished"]
    assert server.process.returncode == -signal.SIGTERM
