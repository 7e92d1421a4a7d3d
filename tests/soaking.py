"""What the soak's agent processes share (tests/*_soak_child.py, run by
tests/test_agents_soak.py): their command line ``BASE_URL RUN --state DIR``, their
client (``OVERSIGHT_TOKEN``) and how many invoices they pay (``SOAK_CALLS``, for the
children whose model is their own)."""

import argparse
import os
from pathlib import Path
from typing import Any


def command_line() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("run")
    parser.add_argument("--state", type=Path, required=True)
    return parser.parse_args()


def client[C](cls: type[C], url: str) -> C:
    return cls(url, os.environ["OVERSIGHT_TOKEN"], backoff=0.1)


def calls() -> int:
    return int(os.environ["SOAK_CALLS"])


def invoice(n: int) -> dict[str, Any]:
    """The n-th invoice the soak's agents pay."""
    return {"invoice": f"INV-{n}", "amount": 10 * n}
