"""``Oversight``: the client for plain (blocking) Python."""

import functools
import inspect
import ssl
from collections.abc import Callable, Iterator
from typing import Any

from oversight_client.base import Client, returning
from oversight_client.steps import Steps, run
from oversight_client.tool_options import ToolOptions
from oversight_client.tools import supervised
from oversight_client.transport import UrllibTransport


class Oversight(Client):
    __doc__ = Client.__doc__

    def _connect(self, context: ssl.SSLContext | None, max_waits: int | None) -> UrllibTransport:
        return UrllibTransport(context, max_waits)

    @staticmethod
    def _expose(method: Callable[..., Steps[Any]]) -> Callable[..., Any]:
        @functools.wraps(method)
        def call(self: "Oversight", *args: Any, **kwargs: Any) -> Any:
            return self._drive(method(self._core, *args, **kwargs))

        return returning(call, method)

    def _drive[T](self, steps: Steps[T]) -> T:
        return run(steps, self._transport)

    def _supervise(self, fn: Callable[..., Any], options: ToolOptions) -> Callable[..., Any]:
        for part in (fn, options.verify, options.undo):
            if inspect.iscoroutinefunction(part):
                raise TypeError(f"{part.__qualname__} is async: use AsyncOversight")

        @functools.wraps(fn)
        def supervised_tool(run_id: int, call_id: str, /, **arguments: Any) -> Any:
            return self._drive(supervised(self._core, options, fn, run_id, call_id, arguments))

        return supervised_tool

    def events(self, after: int = 0, *, wait: int = 30, limit: int = 100) -> Iterator[dict]:
        """The token's feed, forever: every decision, status change and cancellation of
        its runs after the cursor ``after``, in order (each event's ``seq`` is the cursor
        to resume from: keep the last one you handled)."""
        cursor = after
        while True:
            page = self._drive(self._core.events_page(cursor, wait, limit))
            yield from page["events"]
            cursor = page["cursor"]
