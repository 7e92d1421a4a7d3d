"""The sans-I/O core's steps, and the two drivers that carry them out.

Every client method is written once, as a generator that yields steps (``Send`` an HTTP
request, ``Sleep``, ``Invoke`` a function of the agent's) and receives each step's result
(or has its exception thrown in). ``run`` drives such a generator with blocking I/O,
``run_async`` with asyncio: the sync and async clients share every method's logic.

Whatever interrupts a step is thrown in too, a cancelled task's ``CancelledError`` or a
``KeyboardInterrupt`` included, so that a wait can withdraw what it waited for before
the interruption goes on.

An ``Invoke`` may ``Keep`` a lease while the agent's function runs: ``run`` renews it
from a thread, ``run_async`` from a task (which a function blocking the event loop
blocks too: its lease may lapse, and what it records after that is refused).
The function is never interrupted: the effect may be half-way. A renewal refused means
the lease is lost, and the step raises that once the function is done, whatever it
returned or raised (but a Ctrl-C or a cancel, which go on as they are)."""

import asyncio
import contextlib
import inspect
import threading
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

from oversight_client.transport import HttpRequest, StreamTransport, UrllibTransport


class WrongClient(TypeError):
    """An async function given to the sync client: the caller's mistake, never an
    answer of the function's."""


@dataclass(frozen=True)
class Send:
    request: HttpRequest


@dataclass(frozen=True)
class Sleep:
    seconds: float


type Step = Send | Sleep | Invoke
type Steps[T] = Generator[Step, Any, T]


@dataclass(frozen=True)
class Keep:
    """A lease to renew while an ``Invoke`` runs: ``renew()`` gives the steps of one
    renewal (raising once the lease is lost), taken every ``every`` seconds."""

    renew: Callable[[], Steps[Any]]
    every: float


@dataclass(frozen=True)
class Invoke:
    """Call one of the agent's functions (a tool, its verify or undo); the async client
    awaits what it returns if that is awaitable. With ``keep``, its lease is renewed
    meanwhile."""

    fn: Callable[..., Any]
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    keep: Keep | None = None


class Progress[T]:
    """How far a generator of steps has got: its next step, given the result of the
    last one or the exception it raised (a cancelled task's ``CancelledError`` too: the
    steps may clean up), and what it returned once done."""

    def __init__(self, steps: Steps[T]) -> None:
        self.steps = steps
        self.reply: Any = None
        self.error: BaseException | None = None
        self.value: T

    def next_step(self) -> Step | None:
        """The next step, or None once the generator has returned (``value``)."""
        try:
            if self.error is None:
                return self.steps.send(self.reply)
            return self.steps.throw(self.error)
        except StopIteration as done:
            self.value = done.value
            return None

    def answer(self, reply: Any = None, error: BaseException | None = None) -> None:
        self.reply, self.error = reply, error


def run[T](steps: Steps[T], transport: UrllibTransport) -> T:
    """Drive ``steps`` to the end with blocking I/O; returns what the generator returns."""
    progress = Progress(steps)
    while (step := progress.next_step()) is not None:
        try:
            progress.answer(perform(step, transport))
        except BaseException as exc:
            progress.answer(error=exc)
    return progress.value


async def run_async[T](steps: Steps[T], transport: StreamTransport) -> T:
    """Drive ``steps`` to the end on the running event loop."""
    progress = Progress(steps)
    while (step := progress.next_step()) is not None:
        try:
            progress.answer(await perform_async(step, transport))
        except BaseException as exc:
            progress.answer(error=exc)
    return progress.value


def perform(step: Step, transport: UrllibTransport) -> Any:
    match step:
        case Send(request):
            return transport.send(request)
        case Sleep(seconds):
            return time.sleep(seconds)
        case Invoke(keep=Keep() as keep):
            with kept(keep, transport):
                return invoke(step)
        case Invoke():
            return invoke(step)


def invoke(step: Invoke) -> Any:
    result = step.fn(*step.args, **step.kwargs)
    if inspect.isawaitable(result):
        close = getattr(result, "close", None)
        if close:
            close()  # never awaited: no "coroutine was never awaited" warning
        raise WrongClient(f"{step.fn.__qualname__} is async: use AsyncOversight")
    return result


@contextlib.contextmanager
def kept(keep: Keep, transport: UrllibTransport) -> Iterator[None]:
    """Renew ``keep``'s lease from a thread while the body runs; then raise what lost
    it, if anything did, rather than what the body returned or raised (nothing more may
    be recorded). Ctrl-C goes on as it is."""
    stop, lost = threading.Event(), []

    def beat() -> None:
        while not stop.wait(keep.every):
            try:
                run(keep.renew(), transport)
            except Exception as exc:
                lost.append(exc)
                return

    def stopped() -> list[Exception]:
        stop.set()
        beating.join()
        return lost

    beating = threading.Thread(target=beat, name="oversight-lease", daemon=True)
    beating.start()
    try:
        yield
    except BaseException as exc:
        if stopped() and isinstance(exc, Exception):
            raise lost[0] from exc
        raise
    if stopped():
        raise lost[0]


async def perform_async(step: Step, transport: StreamTransport) -> Any:
    match step:
        case Send(request):
            return await transport.send(request)
        case Sleep(seconds):
            return await asyncio.sleep(seconds)
        case Invoke(keep=Keep() as keep):
            async with kept_async(keep, transport):
                return await invoke_async(step)
        case Invoke():
            return await invoke_async(step)


async def invoke_async(step: Invoke) -> Any:
    result = step.fn(*step.args, **step.kwargs)
    return await result if inspect.isawaitable(result) else result


@contextlib.asynccontextmanager
async def kept_async(keep: Keep, transport: StreamTransport) -> AsyncIterator[None]:
    """``kept`` on the event loop: the lease is renewed by a task; a cancel goes on as
    it is."""
    lost: list[Exception] = []

    async def beat() -> None:
        while True:
            await asyncio.sleep(keep.every)
            try:
                await run_async(keep.renew(), transport)
            except Exception as exc:
                lost.append(exc)
                return

    async def stopped() -> list[Exception]:
        beating.cancel()
        await asyncio.wait([beating])  # unlike awaiting it, keeps a cancel of our own
        return lost

    beating = asyncio.create_task(beat())
    try:
        yield
    except BaseException as exc:
        if await stopped() and isinstance(exc, Exception):
            raise lost[0] from exc
        raise
    if await stopped():
        raise lost[0]
