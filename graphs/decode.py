"""Channel values of stored LangGraph checkpoints as text for the audit page.

Imports LangGraph (the server's ``langgraph`` extra) when first called, not when the
server starts. Values are decoded with LangGraph's serializer in its strict mode; a value
it cannot decode (an encrypted serializer, a type this process cannot load) gives None,
and the page shows the checkpoint's metadata only.
"""

import dataclasses
import json
from typing import Any

# What an auditor needs of a LangChain message (not its ids and response metadata).
MESSAGE_FIELDS = {"type", "name", "content", "tool_calls", "tool_call_id", "status"}


def _plain(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        from langchain_core.messages import BaseMessage  # loaded: a message was decoded

        include = MESSAGE_FIELDS if isinstance(value, BaseMessage) else None
        return value.model_dump(mode="json", include=include)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return repr(value)


def as_text(value: Any) -> str:
    return json.dumps(value, default=_plain, indent=2, ensure_ascii=False, sort_keys=True)


def decoder():
    """A function (type, blob) -> decoded value or None; None if LangGraph is missing.

    Never the agents' serializer: by default it imports and calls whatever a blob names,
    and whoever can write these tables (an agent beside Oversight) would run code in the
    web process. This one builds only LangGraph's and LangChain's own safe types (a
    message, a datetime…); anything else is shown as the data it was stored with."""
    try:
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
    except ImportError:
        return None
    serde = JsonPlusSerializer(allowed_msgpack_modules=None, allowed_json_modules=None)

    def decode(type_: str, blob: bytes) -> Any:
        try:
            return serde.loads_typed((type_, bytes(blob)))
        except Exception:  # Whatever the serializer raises: the page falls back to metadata.
            return None

    return decode
