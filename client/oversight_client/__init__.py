"""oversight-client: the agent side of Oversight (human oversight and approvals for AI
agents), standard library only.

    from oversight_client import Oversight, Rejected

    ovs = Oversight("https://oversight.example.com", token="ovs_…")
    session = ovs.open_session(title="Month-end close", external_id="thread-42")
    run = ovs.start_run(session["id"], goal="Pay the supplier invoice")

``AsyncOversight`` has the same methods, as coroutines. Every create carries an
``Idempotency-Key``; a request failing on the way (connection refused or reset, timeout,
429, 502/503/504) is sent again with the same key, so the server answers a retry with
the first answer instead of acting twice. Error answers become typed exceptions, all
subclasses of ``OversightError``; so do operations and requests that end without what
was asked for.
"""

from oversight_client.aio import AsyncOversight
from oversight_client.core import Resume
from oversight_client.errors import (
    Cancelled,
    Conflict,
    Expired,
    Failed,
    InvalidRequest,
    InvalidResponse,
    NotFound,
    NotProposed,
    OperationEnded,
    OversightError,
    PreconditionFailed,
    Rejected,
    RunClosed,
    StaleState,
    Unauthorized,
    Unreachable,
    VerificationFailed,
    WaitTimedOut,
)
from oversight_client.follower import Follower
from oversight_client.sync import Oversight
from oversight_client.tools import Observed
from oversight_client.version import __version__ as __version__

__all__ = [
    "AsyncOversight",
    "Cancelled",
    "Conflict",
    "Expired",
    "Failed",
    "Follower",
    "InvalidRequest",
    "InvalidResponse",
    "NotFound",
    "NotProposed",
    "Observed",
    "OperationEnded",
    "Oversight",
    "OversightError",
    "PreconditionFailed",
    "Rejected",
    "Resume",
    "RunClosed",
    "StaleState",
    "Unauthorized",
    "Unreachable",
    "VerificationFailed",
    "WaitTimedOut",
]
