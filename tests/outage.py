"""An outage of Oversight, as an agent sees it: a TCP relay to the live server that can
be cut (every connection open through it is reset, and new ones are refused) and
restored. Agents under test talk to ``url``; the suite's own checks go straight to the
server."""

import socket
import struct
import threading
from contextlib import suppress

from tests.test_client import read_request


class Outage:
    """A relay to ``upstream`` (``http://host:port``) on a port of its own: ``cut()``,
    ``hang()`` (connections are taken and never answered), ``restore()``, and
    ``cut_for(seconds)``, which restores it on its own. ``cuts`` counts the outages so
    far."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        self.upstream = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.up, self.cuts = True, 0
        self.hanging: list[socket.socket] | None = None  # held unanswered while hung
        self.losing: bytes | None = None  # requests starting so are sent, answers lost
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def __enter__(self) -> "Outage":
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()
        self.listener.close()

    def cut(self) -> None:
        with self._lock:
            self.up, self.cuts = False, self.cuts + 1
            for sock in self._open:
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            self._open.clear()

    def hang(self) -> None:
        self.hanging = []

    def restore(self) -> None:
        self.up = True
        held, self.hanging = self.hanging or [], None
        for sock in held:
            sock.close()

    def lose_answers(self, start: bytes | None) -> None:
        """Send on the requests that start with ``start`` (``b"POST /api/v1/runs/"``),
        and lose their answers: the server acts, the agent hears nothing (None: stop)."""
        self.losing = start

    def cut_for(self, seconds: float) -> None:
        self.cut()
        timer = threading.Timer(seconds, self.restore)
        timer.daemon = True
        timer.start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.hanging is not None:
                self.hanging.append(client)
                continue
            if not self.up:
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                client.close()  # a reset, as from a host that is down
                continue
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            if self.losing and client.recv(len(self.losing), socket.MSG_PEEK) == self.losing:
                threading.Thread(target=self._lose, args=(client, server), daemon=True).start()
                continue
            with self._lock:
                self._open.update((client, server))
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _lose(self, client: socket.socket, server: socket.socket) -> None:
        """Relay one request, wait for the server's whole answer, and drop it."""
        with client, server, suppress(OSError):
            request = read_request(client)
            server.sendall(request)
            server.shutdown(socket.SHUT_WR)
            while server.recv(65536):
                pass

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for sock in (source, sink):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        with self._lock:
            self._open.discard(source)
            self._open.discard(sink)
        source.close()
