"""A small process supervisor for the demo: starts each child, restarts one that dies,
and stops them all on Ctrl-C or SIGTERM. A child that dies right after it started
(a port in use, a bad setting) stops the demo with one clear line instead of looping."""

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field

STARTUP_GRACE_SECONDS = 3.0


@dataclass
class Child:
    name: str
    argv: list[str]
    # A child with work that ends (an agent on one thread): exiting with 0, it is done.
    once: bool = False
    env: dict[str, str] = field(default_factory=dict)  # added to the demo's environment
    process: subprocess.Popen | None = None
    started_at: float = field(default=0.0)
    finished: bool = False

    def start(self) -> None:
        self.process = subprocess.Popen(self.argv, env={**os.environ, **self.env})
        self.started_at = time.monotonic()


class Supervisor:
    def __init__(self, children: list[Child], write=print) -> None:
        self.children = children
        self.write = write
        self.stopping = False

    def run(self) -> int:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._stop)
        for child in self.children:
            child.start()
        try:
            while not self.stopping:
                failed = self._check_children()
                if failed:
                    return 1
                time.sleep(0.5)
            return 0
        finally:
            self._terminate_all()

    def _check_children(self) -> bool:
        """Restart a dead child; report True when one died during its start-up."""
        for child in self.children:
            code = child.process.poll()
            if code is None or self.stopping or child.finished:
                continue
            if child.once and code == 0:
                self.write(f"{child.name} finished")
                child.finished = True
                continue
            if time.monotonic() - child.started_at < STARTUP_GRACE_SECONDS:
                self.write(f"error: {child.name} stopped right after starting (exit code {code})")
                return True
            self.write(f"{child.name} exited with code {code}; restarting it")
            child.start()
        return False

    def _stop(self, signum, _frame) -> None:
        self.stopping = True

    def _terminate_all(self) -> None:
        running = [c.process for c in self.children if c.process and c.process.poll() is None]
        for process in running:
            process.terminate()
        deadline = time.monotonic() + 10
        for process in running:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
