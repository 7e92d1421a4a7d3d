"""A small HTTP service for ``http.request`` to act on, used by the demo and the tests.

- ``PUT /items/<id>`` stores a JSON item; ``DELETE /items/<id>`` removes it;
  ``GET /items/<id>`` reads it back (404 when absent) with an ``ETag``. Writes honour
  what ``http.request`` sends: a repeated ``Idempotency-Key`` replays the first answer
  without applying again, an ``Oversight-Fencing-Epoch`` lower than one already seen
  for the key is refused (409), and an ``If-Match`` that is not the item's ETag is
  refused (412).
- ``/rigged/items/<id>`` answers 200 but garbles the write: it stores the item without
  the fields sent, so only verification can tell.
- ``/naive/items/<id>`` applies every request, ignoring keys, epochs and ETags.
- ``/slow/items/<id>`` behaves like ``/items/<id>`` after a two-second pause.
- ``GET /stats`` reports how many times each key was applied (for tests).
"""

import hashlib
import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SLOW_SECONDS = 2.0
HONEST = ("items", "slow")


class TargetState:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: dict[str, dict] = {}
        self.replies: dict[str, tuple[int, dict]] = {}
        self.epochs: dict[str, int] = {}
        self.applied: Counter[str] = Counter()
        self.received: Counter[str] = Counter()  # requests to change, applied or not


def etag(item: dict) -> str:
    return '"' + hashlib.sha256(json.dumps(item, sort_keys=True).encode()).hexdigest()[:16] + '"'


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
        if found is None:
            return self._reply(404, {"error": "absent"})
        self._reply(200, found, {"ETag": etag(found)})

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
        with self.state.lock:
            self.state.received[key] += 1
        if mode == "slow":
            time.sleep(SLOW_SECONDS)
        with self.state.lock:
            if mode in HONEST:
                refusal = self._refusal(item, key)
                if refusal:
                    return self._reply(*refusal)
            if mode == "rigged":
                apply(item, {"id": item})
            else:
                apply(item, body)
            self.state.applied[key] += 1
            reply = (200, {"id": item, **(body or {})})
            if key:
                self.state.replies[key] = reply
        self._reply(*reply)

    def _refusal(self, item: str, key: str) -> tuple[int, dict] | None:
        """Why an honest target does not apply this request (None: apply it)."""
        epoch = int(self.headers.get("Oversight-Fencing-Epoch") or 0)
        if key and epoch < self.state.epochs.get(key, 0):
            return 409, {"error": f"epoch {epoch} is stale for this key"}
        if key:
            self.state.epochs[key] = epoch
        if key in self.state.replies:
            return self.state.replies[key]
        expected = self.headers.get("If-Match")
        current = self.state.items.get(item)
        if expected and (current is None or etag(current) != expected):
            return 412, {"error": "the item changed since it was read"}
        return None

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

    def _reply(self, status: int, body: dict, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


def make_server(host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A server with fresh state; ``port=0`` picks a free port (see ``server_address``)."""
    handler = type("TargetHandler", (Handler,), {"state": TargetState()})
    return ThreadingHTTPServer((host, port), handler)
