"""The demo's supervisor, with real child processes."""

import os
import signal
import sys
import threading
import time

from runs.supervisor import Child, Supervisor


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


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
    supervisor = Supervisor([child], write=lines.append)
    threading.Timer(5.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
    started = time.monotonic()
    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert supervisor.run() == 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    assert marker.read_text() == "xx"
    assert lines == ["worker exited with code 0; restarting it"]
    assert child.process.poll() is not None
    assert time.monotonic() - started < 15
