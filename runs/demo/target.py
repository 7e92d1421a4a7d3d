"""A small HTTP service for ``http.request`` to act on, used by the demo and the tests.

- ``PUT /items/<id>`` stores a JSON item; a repeated ``Idempotency-Key`` replays the
  first answer without applying it again. ``DELETE /items/<id>`` removes it.
  ``GET /items/<id>`` reads it back (404 when absent).
- ``/rigged/items/<id>`` answers like ``/items/<id>`` but applies nothing: a target
  whose 200 is a lie, so that only verification can tell.
- ``/naive/items/<id>`` applies every request, ignoring idempotency keys.
- ``/slow/items/<id>`` behaves like ``/items/<id>`` after a two-second pause.
- ``GET /stats`` reports how many times each key was applied (for tests).
"""

import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SLOW_SECONDS = 2.0


class TargetState:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: dict[str, dict] = {}
        self.replies: dict[str, tuple[int, dict]] = {}
        self.applied: Counter[str] = Counter()


class Handler(BaseHTTPRequestHandler):
    state: TargetState

    def log_message(self, format, *args) -> None:  # Quiet: the demo prints enough.
        pass

    def do_GET(self) -> None:
        if self.path == "/stats":
            return self._reply(200, {"applied": dict(self.state.applied)})
        _, item = self._route()
        with self.state.lock:
            found = self.state.items.get(item)
        self._reply(200, found) if found is not None else self._reply(404, {"error": "absent"})

    def do_PUT(self) -> None:
        self._mutate(lambda item, body: self.state.items.__setitem__(item, body))

    def do_DELETE(self) -> None:
        self._mutate(lambda item, body: self.state.items.pop(item, None))

    def _mutate(self, apply) -> None:
        mode, item = self._route()
        if item is None:
            return self._reply(404, {"error": "no such resource"})
        body = self._body()
        key = self.headers.get("Idempotency-Key", "")
        if mode == "slow":
            time.sleep(SLOW_SECONDS)
        with self.state.lock:
            if mode in ("items", "slow") and key and key in self.state.replies:
                return self._reply(*self.state.replies[key])
            if mode != "rigged":
                apply(item, body)
                self.state.applied[key] += 1
            reply = (200, {"id": item, **(body or {})})
            if key:
                self.state.replies[key] = reply
        self._reply(*reply)

    def _route(self) -> tuple[str, str | None]:
        parts = self.path.strip("/").split("/")
        if len(parts) == 2 and parts[0] == "items":
            return "items", parts[1]
        if len(parts) == 3 and parts[0] in ("rigged", "naive", "slow") and parts[1] == "items":
            return parts[0], parts[2]
        return "", None

    def _body(self) -> dict | None:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length)) if length else None

    def _reply(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def make_server(host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A server with fresh state; ``port=0`` picks a free port (see ``server_address``)."""
    handler = type("TargetHandler", (Handler,), {"state": TargetState()})
    return ThreadingHTTPServer((host, port), handler)
