"""Text from a model or a tool made storable as a message of a run: the server refuses
NUL and lone surrogates, and a message over its size limit (64 KiB of JSON, where a
control character takes six bytes), so such text is cleaned and cut, never refused."""

import json

MAX_BYTES = 16_000  # of the text as JSON: well under the server's limit, with the rest


def storable(text: str, max_bytes: int = MAX_BYTES) -> str:
    clean = text.replace("\x00", "\ufffd").encode("utf-8", "replace").decode()
    if size(clean) <= max_bytes:
        return clean
    while size(clean) > max_bytes - 3:
        clean = clean[: len(clean) * 3 // 4]
    return f"{clean}…"


def size(text: str) -> int:
    return len(json.dumps(text, ensure_ascii=False).encode())
