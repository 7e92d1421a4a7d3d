"""A stand-in for the Anthropic Messages API on loopback, for the Claude Code CLI that
the Claude Agent SDK bundles: no key, no network. Its model is a script: asked first, it
calls one tool; once it has the tool's result, it answers with what it read, so a test
sees what reached the model (a reviewer's reason, an edited input, a hook's refusal)."""

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def sse(event: str, data: dict) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def text_of(block: dict) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content or "")


class ScriptedModel:
    """Calls ``tool`` with ``input`` (as ``tool_use_id``; and beside it with each input
    of ``also``, by id). Each later reply is the next step of ``then``: a call
    (``(tool_use_id, input)``) or None, an answer that ends the turn; with no steps left
    it answers ``Read: <the last tool result>``. ``requests`` keeps the bodies it was
    sent."""

    def __init__(self, tool: str, input: dict, tool_use_id: str = "toolu_01") -> None:
        self.tool, self.input, self.tool_use_id = tool, input, tool_use_id
        self.also: dict[str, dict] = {}
        self.then: list[tuple[str, dict] | None] = []
        self.requests: list[dict] = []

    def reply(self, body: dict) -> list[dict]:
        """The content blocks of the next assistant message."""
        self.requests.append(body)
        replied = sum(message["role"] == "assistant" for message in body["messages"])
        if not replied:
            calls = {self.tool_use_id: self.input, **self.also}
        elif replied <= len(self.then) and self.then[replied - 1] is not None:
            calls = dict([self.then[replied - 1]])
        else:
            results = [
                block
                for message in body["messages"]
                if isinstance(message["content"], list)
                for block in message["content"]
                if isinstance(block, dict) and block.get("type") == "tool_result"
            ]
            return [{"type": "text", "text": f"Read: {text_of(results[-1]) if results else ''}"}]
        return [
            {"type": "tool_use", "id": call_id, "name": self.tool, "input": input}
            for call_id, input in calls.items()
        ]


def stream(model: str, blocks: list[dict]) -> bytes:
    """The reply as the API streams it, under an id of its own: the CLI takes two
    replies with one id for parts of the same message."""
    tool = any(b["type"] == "tool_use" for b in blocks)
    usage = {"input_tokens": 10, "output_tokens": 5}
    start = {
        "id": f"msg_{uuid.uuid4().hex}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    out = [sse("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            first, delta = (
                {"type": "text", "text": ""},
                {"type": "text_delta", "text": block["text"]},
            )
        else:
            first = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        out.append(
            sse(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": first},
            )
        )
        out.append(
            sse(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
        )
        out.append(sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    stop = {"stop_reason": "tool_use" if tool else "end_turn", "stop_sequence": None}
    out.append(sse("message_delta", {"type": "message_delta", "delta": stop, "usage": usage}))
    out.append(sse("message_stop", {"type": "message_stop"}))
    return b"".join(out)


class FakeAnthropic:
    """The API on 127.0.0.1 (``url``) while in ``with``; answers ``/v1/messages`` from
    ``model`` and any other request with 404 (the CLI carries on without them)."""

    def __init__(self, model: ScriptedModel) -> None:
        self.model = model
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])) or b"{}")
                if not self.path.startswith("/v1/messages") or "count_tokens" in self.path:
                    self.send_response(404)
                    self.end_headers()
                    return
                payload = stream(body.get("model", "claude"), fake.model.reply(body))
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "FakeAnthropic":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def cli_env(api: FakeAnthropic, home: str) -> dict[str, str]:
    """The bundled CLI's environment for ``api``: a home of its own (its sessions are
    kept there), a fake key, and no traffic beyond the model's."""
    return {
        "ANTHROPIC_BASE_URL": api.url,
        "ANTHROPIC_API_KEY": "sk-fake",
        "HOME": home,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
