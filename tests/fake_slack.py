"""A fake of Slack on loopback, for the tests: its Web API (``chat.postMessage``,
``chat.update``, ``chat.delete``, ``views.open``, checking the bot token) and the ``response_url`` a
callback carries, keeping every call; and Slack's side of the interactivity callbacks,
signed as Slack signs them (or not), posted to Oversight's endpoint. A message posted to
a user (``U…``) goes to the app's direct conversation with them (``D…``), as in Slack,
whose id the answer gives and ``chat.update`` needs."""

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlencode

BOT_TOKEN = "xoxb-fake-bot-token"
SIGNING_SECRET = "fake-signing-secret-0123456789abcdef"
TEAM = "T0FAKE"
CHANNEL = "C0REVIEWS"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        slack = self.server.slack
        if self.path.startswith("/respond/"):
            slack.record("reply", body)
            return self._answer({"ok": True})
        method = self.path.removeprefix("/api/")
        if self.headers.get("Authorization") != f"Bearer {BOT_TOKEN}":
            return self._answer({"ok": False, "error": "invalid_auth"})
        if error := slack.refuse.get(method) or _invalid_blocks(body) or _not_a_channel(body):
            return self._answer({"ok": False, "error": error})
        if method == "chat.postMessage":
            slack.while_posting()
        said = {"ok": True}
        with slack.lock:
            if method == "chat.postMessage":
                said["ts"] = f"{1_700_000_000 + len(slack.messages)}.000100"
                said["channel"] = conversation(body["channel"])
                slack.messages[said["ts"]] = body
            elif method == "chat.update":
                slack.messages[body["ts"]] = body
            elif method == "chat.delete":
                slack.messages.pop(body["ts"], None)
        slack.record(method, body)
        self._answer(said)

    def _answer(self, said: dict) -> None:
        raw = json.dumps(said).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


class FakeSlack:
    def __init__(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.slack, self.server.daemon_threads = self, True
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        self.base = f"http://{self.host}"
        self.lock = threading.Condition()
        self.calls: list[tuple[str, dict]] = []
        self.messages: dict[str, dict] = {}  # ts: the message as last posted or updated
        self.refuse: dict[str, str] = {}  # method: the error Slack answers it with
        self.presses = 0
        # Called before a post is answered: what happens while Oversight waits on Slack.
        self.while_posting = lambda: None
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def record(self, method: str, body: dict) -> None:
        with self.lock:
            self.calls.append((method, body))
            self.lock.notify_all()

    def called(self, method: str) -> list[dict]:
        with self.lock:
            return [body for name, body in self.calls if name == method]

    def replies(self, count: int = 1, seconds: float = 10) -> list[str]:
        """The ephemeral replies' texts, once there are ``count`` (they come from a
        thread of Oversight's)."""
        with self.lock:  # A Condition's lock is reentrant: ``called`` takes it again.
            self.lock.wait_for(lambda: len(self.called("reply")) >= count, seconds)
            return [body["text"] for body in self.called("reply")]

    def only_message(self) -> dict:
        [message] = self.messages.values()
        return message

    def press(self, client, button: dict, slack_user: str, **signing) -> object:
        """``slack_user`` presses ``button`` (a button of a posted message), as Slack
        tells Oversight of it."""
        self.presses += 1
        payload = {
            "type": "block_actions",
            "team": {"id": TEAM},
            "user": {"id": slack_user},
            "trigger_id": f"trigger-{self.presses}",
            "response_url": f"{self.base}/respond/{self.presses}",
            "actions": [{"action_id": button["action_id"], "value": button.get("value", "")}],
        }
        return callback(client, payload, **signing)

    def submit_reason(self, client, slack_user: str, reason: str, **signing) -> object:
        """``slack_user`` submits the last dialog Oversight opened, with ``reason``."""
        return self.submit(client, slack_user, "reason", reason, **signing)

    def submit(self, client, slack_user: str, block: str, typed: str, **signing) -> object:
        """``slack_user`` submits the last dialog Oversight opened, ``typed`` in its
        input ``block``."""
        view = self.called("views.open")[-1]["view"]
        view = view | {"state": {"values": {block: {block: {"value": typed}}}}}
        payload = {
            "type": "view_submission",
            "team": {"id": TEAM},
            "user": {"id": slack_user},
            "view": view,
        }
        return callback(client, payload, **signing)


def _invalid_blocks(body: dict) -> str:
    """Slack's refusal of a message whose buttons repeat an ``action_id`` in a block."""
    for block in body.get("blocks", []):
        ids = [element.get("action_id") for element in block.get("elements", [])]
        if block["type"] == "actions" and len(ids) != len(set(ids)):
            return "invalid_blocks"
    return ""


def conversation(channel: str) -> str:
    """Where Slack posts a message for ``channel``: a user's id opens the app's direct
    conversation with them."""
    return f"D{channel[1:]}" if channel.startswith("U") else channel


def _not_a_channel(body: dict) -> str:
    """Slack's refusal of an update addressed to a user rather than a conversation."""
    return "channel_not_found" if "ts" in body and body.get("channel", "").startswith("U") else ""


def callback(client, payload: dict, secret: str = SIGNING_SECRET, age: float = 0) -> object:
    """Slack's POST of ``payload`` to the interactivity endpoint, signed with ``secret``
    at a timestamp ``age`` seconds old."""
    body = urlencode({"payload": json.dumps(payload)})
    stamp = str(int(time.time() - age))
    signature = hmac.new(secret.encode(), f"v0:{stamp}:{body}".encode(), hashlib.sha256)
    return client.post(
        "/slack/interactivity",
        body,
        content_type="application/x-www-form-urlencoded",
        headers={
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": f"v0={signature.hexdigest()}",
        },
    )


def buttons(message: dict) -> dict[str, dict]:
    """A message's buttons, by their text."""
    return {
        element["text"]["text"]: element
        for block in message["blocks"]
        if block["type"] == "actions"
        for element in block["elements"]
    }


def text_of(message: dict) -> str:
    """All the text a message shows."""
    said = []
    for block in message["blocks"]:
        said.append(block.get("text", {}).get("text", ""))
        said.extend(field["text"] for field in block.get("fields", []))
        if block["type"] == "context":
            said.extend(element["text"] for element in block["elements"])
    return "\n".join(said)
