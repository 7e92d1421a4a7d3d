"""``AsyncOversight``: the client for asyncio. Every method is a coroutine; waits hold a
socket each, not a thread, so one event loop can wait on many decisions at once."""

import functools
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any

from oversight_client.base import Client, returning
from oversight_client.steps import Steps, run_async
from oversight_client.tool_options import ToolOptions
from oversight_client.tools import supervised
from oversight_client.transport import StreamTransport


class AsyncOversight(Client):
    __doc__ = Client.__doc__

    def _connect(self, context: ssl.SSLContext | None, max_waits: int | None) -> StreamTransport:
        return StreamTransport(context, max_waits)

    @staticmethod
    def _expose(method: Callable[..., Steps[Any]]) -> Callable[..., Any]:
        @functools.wraps(method)
        async def call(self: "AsyncOversight", *args: Any, **kwargs: Any) -> Any:
            return await self._drive(method(self._core, *args, **kwargs))

        return returning(call, method)

    async def _drive[T](self, steps: Steps[T]) -> T:
        return await run_async(steps, self._transport)

    def _supervise(self, fn: Callable[..., Any], options: ToolOptions) -> Callable[..., Any]:
        @functools.wraps(fn)
        async def supervised_tool(run_id: int, call_id: str, /, **arguments: Any) -> Any:
            return await self._drive(
                supervised(self._core, options, fn, run_id, call_id, arguments)
            )

        return supervised_tool

    async def events(
        self, after: int = 0, *, wait: int = 30, limit: int = 100
    ) -> AsyncIterator[dict]:
        """The token's feed, forever (``async for``): as ``Oversight.events``."""
        cursor = after
        while True:
            page = await self._drive(self._core.events_page(cursor, wait, limit))
            for event in page["events"]:
                yield event
            cursor = page["cursor"]
