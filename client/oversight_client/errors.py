"""The typed exceptions: an error answer from the API becomes one of them, and so does an
operation or a human request that ended without what the agent asked for."""

import json
from typing import Any


class OversightError(Exception):
    """An error answer from the API, or an operation or request that ended otherwise.

    ``status`` is the HTTP status (None when no HTTP error was answered), ``code`` the
    API's stable error code (or the object's final status), ``detail`` the sentence for a
    person, ``field`` the request field at fault; ``operation`` or ``request`` is the
    operation or human request as last read, when the error is about one."""

    def __init__(
        self,
        status: int | None,
        code: str,
        detail: str,
        field: str | None = None,
        *,
        operation: dict | None = None,
        request: dict | None = None,
    ) -> None:
        super().__init__(f"{code}: {detail}")
        self.status, self.code, self.detail, self.field = status, code, detail, field
        self.operation, self.request = operation, request


class Unreachable(OversightError):
    """Every attempt failed on the way (connection, timeout, 429, 502/503/504)."""


class NotProposed(Unreachable):
    """A supervised call given up: Oversight stayed out of reach while it was being
    proposed, until the client's ``wait_timeout`` passed. It was not made; a proposal
    that reached Oversight all the same is never made by the agent, and expires."""


class InvalidResponse(OversightError):
    """The server answered something that is not the API's JSON: a garbled body, or not
    Oversight at that address (a proxy's or a login page). ``detail`` quotes it."""


class Unauthorized(OversightError):
    """401: the token is unknown or revoked."""


class NotFound(OversightError):
    """404: no such object for this token."""


class InvalidRequest(OversightError):
    """422 or 413: the request was malformed or over a limit (``field`` says where)."""


class Conflict(OversightError):
    """409: e.g. the call_id was already proposed with other arguments, or an external id
    already names another object (``code`` ``external_id_conflict``)."""


class StaleState(Conflict):
    """409 stale_version: the run or operation moved on; read it again and re-decide."""


class RunClosed(Conflict):
    """409 run_closed: the run is finished or cancelled and accepts nothing more."""


class WaitTimedOut(OversightError):
    """A wait ran out (the client's ``wait_timeout``, or the call's ``timeout``). The
    operation or request was withdrawn first: nothing it asked for will happen."""


class OperationEnded(OversightError):
    """The operation, or the human request, ended without what was asked for."""

    @classmethod
    def of(cls, operation: dict) -> "OperationEnded":
        detail = operation["status_reason"] or operation["status"]
        return cls(None, operation["status"], detail, operation=operation)

    @classmethod
    def of_request(cls, request: dict) -> "OperationEnded":
        detail = (request.get("answer") or {}).get("comment") or request["status"]
        return cls(None, request["status"], detail, request=request)

    @property
    def result(self) -> dict:
        result = (self.operation or {}).get("result")
        return result if isinstance(result, dict) else {}


class Rejected(OperationEnded):
    """A reviewer rejected the operation or request: ``reason`` says why, or (operations
    only) ``reply`` is what they asked the agent to consider instead."""

    @property
    def reason(self) -> str | None:
        if self.request is not None:
            return (self.request.get("answer") or {}).get("comment")
        return self.result.get("reason")

    @property
    def reply(self) -> str | None:
        return self.result.get("reply")


class Expired(OperationEnded):
    """Nobody decided (or answered) in time, or the approval lapsed before execution."""


class Cancelled(OperationEnded, RunClosed):
    """The run was cancelled (so was the operation or request, if it was still open), or
    the agent withdrew it."""


class PreconditionFailed(OperationEnded):
    """The server checked the action's precondition before executing and it failed."""

    @property
    def reason(self) -> str:
        return self.detail


class Failed(OperationEnded):
    """The effect did not happen: the target refused it, or verification showed it
    absent. Nothing was rolled back, since there was nothing to roll back."""


class VerificationFailed(OperationEnded):
    """The effect could not be verified. ``outcome`` is what happened next:
    ``rolled_back``, ``compensated``, ``alerted`` (a person must reconcile), or
    ``verify_failed`` (the rollback has not been reported yet)."""

    @property
    def outcome(self) -> str:
        return self.operation["status"] if self.operation else self.code


# The final statuses of an operation or request without the effect or answer asked for.
ENDED: dict[str, type[OperationEnded]] = {
    "rejected": Rejected,
    "expired": Expired,
    "cancelled": Cancelled,
    "precondition_failed": PreconditionFailed,
    "failed": Failed,
    "rolled_back": VerificationFailed,
    "compensated": VerificationFailed,
    "alerted": VerificationFailed,
}
BY_STATUS: dict[int, type[OversightError]] = {
    401: Unauthorized,
    404: NotFound,
    409: Conflict,
    413: InvalidRequest,
    422: InvalidRequest,
}


def error_class(status: int, code: str, detail: str) -> type[OversightError]:
    """The exception for an error answer. The API answers ``run_closed`` both for a
    cancelled run and for an operation that expired before its claim: the detail says
    which."""
    if code == "stale_version":
        return StaleState
    if code == "run_closed":
        if " cancelled" in detail:
            return Cancelled
        return Expired if " expired" in detail else RunClosed
    return BY_STATUS.get(status, OversightError)


def error_from(status: int, body: bytes) -> OversightError:
    """The exception for an error answer's Problem body ``{error, detail, field}``."""
    try:
        problem: Any = json.loads(body)
        code, detail, field = problem["error"], problem["detail"], problem.get("field")
    except (ValueError, KeyError, TypeError):
        code, detail, field = "http_error", body.decode(errors="replace")[:500], None
    return error_class(status, code, detail)(status, code, detail, field)
