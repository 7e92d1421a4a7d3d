"""What a model reads about its supervised calls, the same in every framework's adapter:
the output as JSON, a reviewer's edit, and why a call ended without its effect."""

import json
from typing import Any

from oversight_client.errors import (
    ENDED,
    Cancelled,
    Expired,
    NotProposed,
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


UNREACHABLE = "This call was not made: Oversight could not be reached to ask a reviewer."


def outcome(ended: Exception) -> str:
    """What the model reads when its call ended without the effect."""
    if isinstance(ended, NotProposed):
        return UNREACHABLE
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


NOT_MADE = ("rejected", "expired", "cancelled", "precondition_failed", "failed")


def interrupted(call: str, operation: dict | None) -> str:
    """What the model reads of its call ``call``, interrupted when its agent stopped
    (a framework says only that it may or may not have completed): what Oversight knows
    of it, ``operation`` (None: never proposed)."""
    said = f"Your tool call {call} was interrupted when the agent stopped."
    if operation is None:
        return f"{said} Oversight was never asked about it: it was not made."
    status = operation["status"]
    if status == "committed":
        made = as_text(operation["output"])
        return f"{said} Oversight recorded it made, with this result: {made}. Do not make it again."
    if status in ("proposed", "approved"):
        return f"{said} It was not made; make it again if it is still needed."
    if status in NOT_MADE:
        return f"{said} {outcome(ENDED[status].of(operation))}"
    return f"{said} It may have been made: a person is reconciling it. Do not retry it."
