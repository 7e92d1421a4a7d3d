"""Canonical JSON: one byte string per value, so that equal arguments hash equally
whatever key order or whitespace the agent sent, and a checkpoint hash can be
recomputed from the stored row years later on either database backend."""

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def json_hash(value: Any) -> str:
    return sha256_hex(canonical_json(value))
