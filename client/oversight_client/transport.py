"""One HTTP exchange, sync (urllib) or async (asyncio streams), and nothing else: no
retries, no JSON, no error mapping (``calls`` does those, once, for both).

Each exchange opens its own connection and closes it (``Connection: close``): a long poll
holds one socket, never a thread, so an event loop can wait on hundreds of them. At most
``max_waits`` long polls of a client are sent at once (the others queue for a turn): the
server refuses a token's waits beyond its cap (``OVERSIGHT_API_MAX_WAITS_PER_TOKEN``,
8 by default) with 429s."""

import asyncio
import contextlib
import http.client
import socket
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
import weakref
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class HttpRequest:
    method: str
    url: str
    headers: dict[str, str]
    body: bytes | None
    timeout: float
    long_poll: bool = False


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes


class TransportError(Exception):
    """The exchange failed on the way (refused, reset, timed out, garbled): no answer."""


class NoRedirects(urllib.request.HTTPRedirectHandler):
    """The API never redirects; a redirect is answered as it is, not followed (a POST
    must not turn into a GET somewhere else)."""

    def redirect_request(self, *args, **kwargs) -> None:
        return None


class UrllibTransport:
    """Blocking exchanges with urllib (which sends ``Connection: close`` itself)."""

    def __init__(self, context: ssl.SSLContext | None, max_waits: int | None) -> None:
        https = urllib.request.HTTPSHandler(context=context)
        self.opener = urllib.request.build_opener(NoRedirects, https)
        self.waits = threading.BoundedSemaphore(max_waits) if max_waits else None

    def send(self, request: HttpRequest) -> HttpResponse:
        """Send ``request`` and return the answer, whatever its status."""
        with self.turn(request):
            return self.exchange(request)

    @contextlib.contextmanager
    def turn(self, request: HttpRequest) -> Iterator[None]:
        """Wait for a long poll's turn (the threads of a client share the cap)."""
        if self.waits is None or not request.long_poll:
            yield
            return
        with self.waits:
            yield

    def exchange(self, request: HttpRequest) -> HttpResponse:
        outgoing = urllib.request.Request(
            request.url, data=request.body, headers=request.headers, method=request.method
        )
        try:
            with self.opener.open(outgoing, timeout=request.timeout) as answer:
                return framed(answer.status, lower(answer.headers.items()), answer.read())
        except urllib.error.HTTPError as error:
            return framed(error.code, lower(error.headers.items()), error.read())
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            raise TransportError(str(exc) or type(exc).__name__) from exc


def framed(status: int, headers: dict[str, str], body: bytes) -> HttpResponse:
    """The answer, unless it was cut short before it said how long it is: http.client
    takes a connection closed in the middle of the headers for their end, and then
    reads an empty body. The API always frames its answers (a length, or chunks)."""
    if not body and "content-length" not in headers and "transfer-encoding" not in headers:
        raise TransportError("the connection closed before the answer's length was known")
    return HttpResponse(status, headers, body)


class StreamTransport:
    """Exchanges over asyncio streams (HTTP/1.1, one connection each). A host name is
    resolved once per transport: asyncio resolves names in a thread pool, and a client
    waiting on hundreds of decisions should not take a thread for each. Its addresses
    are tried in order, as the sync client does (``localhost`` may be ``::1`` first
    while the server listens on 127.0.0.1 only)."""

    def __init__(self, context: ssl.SSLContext | None, max_waits: int | None) -> None:
        self.context = context
        self.max_waits = max_waits
        self.addresses: dict[tuple[str, int], list[str]] = {}
        # One cap per event loop: a semaphore belongs to the loop it first waited on.
        self.waits: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    async def send(self, request: HttpRequest) -> HttpResponse:
        """Send ``request`` and return the answer, whatever its status."""
        async with self.turn(request):
            try:
                async with asyncio.timeout(request.timeout):
                    return await self.exchange(request)
            except (OSError, TimeoutError, EOFError, ValueError) as exc:
                self.addresses.clear()  # the server may have moved: resolve again next time
                raise TransportError(str(exc) or type(exc).__name__) from exc

    @contextlib.asynccontextmanager
    async def turn(self, request: HttpRequest) -> AsyncIterator[None]:
        """Wait for a long poll's turn (the tasks of a client share the cap); the time
        spent queueing does not count against the request's timeout."""
        if not self.max_waits or not request.long_poll:
            yield
            return
        loop = asyncio.get_running_loop()
        waits = self.waits.setdefault(loop, asyncio.Semaphore(self.max_waits))
        async with waits:
            yield

    async def exchange(self, request: HttpRequest) -> HttpResponse:
        url = urllib.parse.urlsplit(request.url)
        tls = url.scheme == "https"
        host, port = url.hostname or "", url.port or (443 if tls else 80)
        secure = (self.context or ssl.create_default_context()) if tls else None
        reader, writer = await self.connect(host, port, secure)
        try:
            writer.write(head(request, url) + (request.body or b""))
            await writer.drain()
            return await read_response(reader)
        finally:
            writer.close()

    async def connect(self, host: str, port: int, secure: ssl.SSLContext | None):
        """A connection to the first of the host's addresses that accepts one."""
        failure: OSError | None = None
        for address in await self.resolve(host, port):
            try:
                return await asyncio.open_connection(
                    address, port, ssl=secure, server_hostname=host if secure else None
                )
            except OSError as exc:
                failure = exc
        raise failure or OSError(f"{host} has no address")

    async def resolve(self, host: str, port: int) -> list[str]:
        if (host, port) not in self.addresses:
            found = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
            self.addresses[host, port] = list(dict.fromkeys(info[4][0] for info in found))
        return self.addresses[host, port]


def head(request: HttpRequest, url: urllib.parse.SplitResult) -> bytes:
    target = (url.path or "/") + (f"?{url.query}" if url.query else "")
    headers = {
        "Host": url.netloc.rpartition("@")[2],
        "Connection": "close",
        "Content-Length": str(len(request.body or b"")),
        **request.headers,
    }
    lines = [f"{request.method} {target} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def read_response(reader: asyncio.StreamReader) -> HttpResponse:
    status_line = (await reader.readline()).decode("latin-1")
    version, status, *_ = status_line.split(" ", 2)
    if not version.startswith("HTTP/") or not status.strip().isdigit():
        raise ValueError(f"not an HTTP answer: {status_line[:80]!r}")
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b"\n"):
        if not line.endswith(b"\n"):  # closed before the headers' end: an answer cut short
            raise EOFError("the connection closed in the middle of the answer's headers")
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return HttpResponse(int(status), headers, await read_body(reader, headers))


async def read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return await read_chunks(reader)
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"]))
    return await reader.read()  # until the server closes the connection


async def read_chunks(reader: asyncio.StreamReader) -> bytes:
    """The chunks' bytes. The connection closing before the last chunk (size 0) is a
    transport error, as a short Content-Length body is: the answer is incomplete."""
    body = bytearray()
    while size := int((await chunk_size_line(reader)).split(b";")[0].strip(), 16):
        body += await reader.readexactly(size)
        await reader.readexactly(2)  # the CRLF after each chunk
    while await reader.readline() not in (b"\r\n", b"\n", b""):
        pass  # trailers
    return bytes(body)


async def chunk_size_line(reader: asyncio.StreamReader) -> bytes:
    line = await reader.readline()
    if not line.endswith(b"\n"):
        raise EOFError("the connection closed in the middle of a chunked answer")
    return line


def lower(items) -> dict[str, str]:
    return {name.lower(): value for name, value in items}
