"""What a model reads about its supervised calls, the same in every framework's adapter:
the output as JSON, a reviewer's edit, and why a call ended without its effect."""

import json
from typing import Any

from oversight_client.errors import (
    Cancelled,
    Expired,
    PreconditionFailed,
    Rejected,
    VerificationFailed,
    WaitTimedOut,
)


def in_order(approved: dict, proposed: dict) -> dict:
    """A reviewer's arguments in the order the model gave its own (PostgreSQL's jsonb
    keeps an order of its own)."""
    return {name: approved[name] for name in proposed if name in approved} | approved


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def edited(arguments: dict, output: Any) -> str:
    """What the model reads when a reviewer edited its arguments before approving."""
    return f"A reviewer changed your arguments to {as_text(arguments)}. Result: {as_text(output)}"


def not_proposed(arguments: str) -> str:
    """What the model reads of a call paused for approval that Oversight was never asked
    about (an approval hook is not asked when the arguments do not parse)."""
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        return "This call was not made: its arguments are not a JSON object."
    return "This call was not made: it is not a tool whose calls Oversight's reviewers decide."


def outcome(ended: Exception) -> str:
    """What the model reads when its call ended without the effect."""
    if isinstance(ended, Rejected):
        said = f"A reviewer rejected this call: {ended.reason or 'no reason given'}"
        return f"{said}. They suggest: {ended.reply}" if ended.reply else said
    if isinstance(ended, WaitTimedOut | Expired):
        return "Nobody decided on this call in time: it was not made."
    if isinstance(ended, Cancelled):
        return f"This call was cancelled ({ended.detail}): it was not made."
    if isinstance(ended, PreconditionFailed):
        return f"This call was not made: its precondition failed: {ended.reason}"
    if isinstance(ended, VerificationFailed):
        return f"This call's effect could not be verified ({ended.outcome}): {ended.detail}"
    return f"This call failed, its effect did not happen: {getattr(ended, 'detail', ended)}"
