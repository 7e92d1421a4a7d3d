"""Text from a model or a tool made storable as a message of a run: the server refuses
NUL and lone surrogates, and a message over its size limit (64 KiB of JSON, where a
control character takes six bytes), so such text is cleaned and cut, never refused."""

import json
from typing import Any

MAX_BYTES = 16_000  # of the text as JSON: well under the server's limit, with the rest


def storable(text: str, max_bytes: int = MAX_BYTES) -> str:
    clean = cleaned(text)
    if size(clean) <= max_bytes:
        return clean
    while size(clean) > max_bytes - 3:
        clean = clean[: len(clean) * 3 // 4]
    return f"{clean}…"


def size(text: str) -> int:
    return len(json.dumps(text, ensure_ascii=False).encode())


def cleaned(text: str) -> str:
    """``text`` without NUL or lone surrogates (each replaced)."""
    return text.replace("\x00", "\ufffd").encode("utf-8", "replace").decode()


def storable_value(value: Any, max_bytes: int = MAX_BYTES) -> Any:
    """A JSON value (a tool's output) as the server stores it: its strings cleaned, or,
    over ``max_bytes`` as JSON, its JSON text cut."""
    if isinstance(value, str):
        value = cleaned(value)
    elif isinstance(value, list):
        value = [storable_value(item, max_bytes) for item in value]
    elif isinstance(value, dict):
        value = {cleaned(str(k)): storable_value(v, max_bytes) for k, v in value.items()}
    text = json.dumps(value, default=str, ensure_ascii=False)
    return value if len(text.encode()) <= max_bytes else storable(text, max_bytes)
