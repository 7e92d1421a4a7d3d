"""The client's documented defaults, ``wait_timeout=900`` and ``max_waits=6``, as an
agent that passes neither gets them: a wait nobody decides is withdrawn after 900
seconds (the client's clock made to run that long), and ten waits at once send six long
polls to the server, the others queueing in the client (below the server's 8 per
token). Both clients."""

import asyncio
import inspect
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.conf import settings

from oversight_client import AsyncOversight, Oversight, WaitTimedOut, waits
from runs.models import Operation
from tests.client_helpers import CLIENTS, NOTE, client_for, drive
from tests.documentation import ROOT, page
from tests.stand_in_server import serving

pytest_plugins = ["tests.client_helpers"]

WAIT_TIMEOUT, MAX_WAITS = 900, 6
CLIENT_README = Path(ROOT, "client", "README.md")


def one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@pytest.mark.parametrize("cls", CLIENTS)
def test_the_defaults_are_the_documented_900_second_wait_and_6_long_polls(cls):
    defaults = inspect.signature(cls).parameters
    assert defaults["wait_timeout"].default == WAIT_TIMEOUT
    assert defaults["max_waits"].default == MAX_WAITS
    agents_guide = one_line(page("agents/index"))
    client_readme = one_line(CLIENT_README.read_text())
    assert f"`Oversight(…, wait_timeout={WAIT_TIMEOUT})`" in agents_guide
    assert f"`max_waits={MAX_WAITS}` at once" in agents_guide
    assert f"`wait_timeout` (default {WAIT_TIMEOUT} s)" in client_readme
    assert f"`max_waits` (default {MAX_WAITS})" in client_readme
    assert MAX_WAITS < settings.OVERSIGHT_API_MAX_WAITS_PER_TOKEN == 8


class Clock:
    """The client's monotonic clock: the start of a wait, then one second short of 900
    seconds later (one read is due), then far beyond."""

    def __init__(self) -> None:
        self.readings = iter([0.0, WAIT_TIMEOUT - 1.0])

    def monotonic(self) -> float:
        return next(self.readings, 10.0 * WAIT_TIMEOUT)


@pytest.mark.parametrize("cls", CLIENTS)
def test_a_wait_nobody_decides_is_withdrawn_after_900_seconds_by_default(
    live_server, client_token, run_id, monkeypatch, cls
):
    client = client_for(live_server, client_token, cls)  # No wait_timeout given.
    op = drive(client.propose(run_id, "note-1", arguments={"line": "paid"}, **NOTE))
    monkeypatch.setattr(waits, "time", Clock())

    with pytest.raises(WaitTimedOut) as timed_out:
        drive(client.wait(op["id"]))

    why = f"the agent stopped waiting after {WAIT_TIMEOUT} s"
    assert timed_out.value.detail == f"operation {op['id']} was withdrawn: {why}"
    withdrawn = Operation.objects.get(pk=op["id"])
    assert (withdrawn.status, withdrawn.status_reason) == ("cancelled", why)


class Holding:
    """A stand-in server's answer that holds every long poll until ``release()``: how
    many it holds ``now``, and the ``peak`` it held at once."""

    def __init__(self) -> None:
        self.arrived = threading.Condition()
        self.now = self.peak = 0
        self.released = False

    def __call__(self, method: str, headers: dict[str, str]) -> tuple[int, bytes]:
        with self.arrived:
            self.now += 1
            self.peak = max(self.peak, self.now)
            self.arrived.notify_all()
            self.arrived.wait_for(lambda: self.released, timeout=60)
            self.now -= 1
        return 200, b'{"id": 1}'

    def held(self, count: int) -> bool:
        """Whether ``count`` long polls were held at once, within a generous deadline."""
        with self.arrived:
            return self.arrived.wait_for(lambda: self.now >= count, timeout=30)

    def release(self) -> None:
        with self.arrived:
            self.released = True
            self.arrived.notify_all()


def ten_waits(client: Oversight | AsyncOversight) -> list:
    """Ten long polls of ``client`` at once: tasks of one event loop, or threads."""
    if isinstance(client, AsyncOversight):

        async def gathered() -> list:
            return await asyncio.gather(*(client.operation(1, wait=5) for _ in range(10)))

        return asyncio.run(gathered())
    with ThreadPoolExecutor(10) as pool:
        return list(pool.map(lambda _: client.operation(1, wait=5), range(10)))


@pytest.mark.parametrize("cls", CLIENTS)
def test_a_client_sends_6_long_polls_at_once_by_default(cls):
    holding = Holding()
    with ThreadPoolExecutor(1) as agent, serving(holding) as url:
        answers = agent.submit(ten_waits, cls(url, "ovs_token"))  # No max_waits given.
        try:
            assert holding.held(MAX_WAITS), f"only {holding.now} long polls reached the server"
        finally:
            holding.release()  # So that the agent's waits end, whatever happened.
        assert answers.result(timeout=60) == [{"id": 1}] * 10
    assert holding.peak == MAX_WAITS
