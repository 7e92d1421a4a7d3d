"""The sans-I/O core's steps, and the two drivers that carry them out.

Every client method is written once, as a generator that yields steps (``Send`` an HTTP
request, ``Sleep``, ``Invoke`` a function of the agent's) and receives each step's result
(or has its exception thrown in). ``run`` drives such a generator with blocking I/O,
``run_async`` with asyncio: the sync and async clients share every method's logic.

Whatever interrupts a step is thrown in too, a cancelled task's ``CancelledError`` or a
``KeyboardInterrupt`` included, so that a wait can withdraw what it waited for before
the interruption goes on."""

import asyncio
import inspect
import time
from collections.abc import Callable, Generator
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


@dataclass(frozen=True)
class Invoke:
    """Call one of the agent's functions (a tool, its verify or undo); the async client
    awaits what it returns if that is awaitable."""

    fn: Callable[..., Any]
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


type Step = Send | Sleep | Invoke
type Steps[T] = Generator[Step, Any, T]


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
        case Invoke(fn, args, kwargs):
            result = fn(*args, **kwargs)
            if inspect.isawaitable(result):
                close = getattr(result, "close", None)
                if close:
                    close()  # never awaited: no "coroutine was never awaited" warning
                raise WrongClient(f"{fn.__qualname__} is async: use AsyncOversight")
            return result


async def perform_async(step: Step, transport: StreamTransport) -> Any:
    match step:
        case Send(request):
            return await transport.send(request)
        case Sleep(seconds):
            return await asyncio.sleep(seconds)
        case Invoke(fn, args, kwargs):
            result = fn(*args, **kwargs)
            return await result if inspect.isawaitable(result) else result
