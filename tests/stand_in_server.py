"""A stand-in for the server, for the client's tests of what a real Oversight never
answers, or cannot be made to answer on cue (a long poll held until the test lets go)."""

import http.server
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# What the stand-in answers a request: (method, headers) -> (status, JSON body), or
# (status, JSON body, headers to add).
Answer = Callable[[str, dict[str, str]], tuple[int, bytes] | tuple[int, bytes, dict[str, str]]]


class StandIn(http.server.ThreadingHTTPServer):
    # Read by the constructor's listen(): the clients' tests open many connections at once.
    request_queue_size = 32


@contextmanager
def serving(answer: Answer) -> Iterator[str]:
    """A threaded HTTP server answering every request with ``answer``; its base URL."""

    class Answering(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.reply()

        def do_POST(self) -> None:
            self.reply()

        def reply(self) -> None:
            status, body, *extra = answer(self.command, dict(self.headers))
            self.send_response(status)
            for name, value in (extra[0] if extra else {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = StandIn(("127.0.0.1", 0), Answering)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
