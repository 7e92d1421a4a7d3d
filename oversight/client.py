"""A Python client for Oversight's agent API (``/api/v1/``), standard library only.

    from oversight.client import Oversight, Rejected

    ovs = Oversight("https://oversight.example.com", token="ovs_…")
    session = ovs.open_session(title="Month-end close")
    run = ovs.start_run(session["id"], goal="Pay the supplier invoice")

    def note_is_there(arguments: dict, key: str) -> bool:
        return f"{arguments['line']} [{key}]" in open(arguments["path"]).read()

    @ovs.tool(action="notes.append", rollback_kind="in_band", verify=note_is_there)
    def append_note(path: str, line: str, *, idempotency_key: str) -> dict:
        with open(path, "a") as notes:
            notes.write(f"{line} [{idempotency_key}]\n")
        return {"appended": line}

    try:
        append_note(run["id"], "call-1", path="notes.md", line="paid")
    except Rejected as no:
        print("the reviewer said:", no.reason or no.reply)

Every mutating request carries an ``Idempotency-Key``; a request that fails on the way
(connection refused or reset, timeout, 502/503/504) is sent again with the same key,
so the server answers a retry with the first answer instead of acting twice. Error
answers become typed exceptions (``StaleState``, ``Cancelled``, ``Rejected``…), all
subclasses of ``OversightError``; so do operations that end without their effect
(``Failed`` when it did not happen, ``VerificationFailed`` when it could not be
verified).
"""

import base64
import functools
import hashlib
import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NoReturn

LONG_POLL_SECONDS = 30  # the server's default OVERSIGHT_API_MAX_WAIT_SECONDS
# Too many waits at once (429, with Retry-After), overloaded, or a gateway gave up.
RETRY_STATUSES = {429, 502, 503, 504}
STALE_ATTEMPTS = 10  # proposals on "the run as it is" while workers keep moving it
IN_PROGRESS = b'"request_in_progress"'
MUTATING = {"POST", "PUT", "PATCH", "DELETE"}


def _seconds(retry_after: str | None) -> float:
    """A Retry-After given in seconds (capped at a minute); 0 if absent or a date."""
    try:
        return min(max(float(retry_after or 0), 0), 60)
    except ValueError:
        return 0


# --- exceptions --------------------------------------------------------------------------


class OversightError(Exception):
    """An error answer from the API, or an operation that ended without its effect.

    ``status`` is the HTTP status (None when no HTTP error was answered), ``code`` the
    API's stable error code (or the operation's final status), ``detail`` the sentence
    for a person, ``field`` the request field at fault, and ``operation`` the operation
    as last read, when the error is about one."""

    def __init__(
        self,
        status: int | None,
        code: str,
        detail: str,
        field: str | None = None,
        operation: dict | None = None,
    ) -> None:
        super().__init__(f"{code}: {detail}")
        self.status, self.code, self.detail, self.field = status, code, detail, field
        self.operation = operation


class Unreachable(OversightError):
    """Every attempt failed on the way (connection, timeout, 502/503/504)."""


class Unauthorized(OversightError):
    """401: the token is unknown or revoked."""


class NotFound(OversightError):
    """404: no such object in the token's project."""


class InvalidRequest(OversightError):
    """422 or 413: the request was malformed or over a limit (``field`` says where)."""


class Conflict(OversightError):
    """409: e.g. the call_id was already proposed with other arguments."""


class StaleState(Conflict):
    """409 stale_version: the run or operation moved on; read it again and re-decide."""


class RunClosed(Conflict):
    """409 run_closed: the run is finished or cancelled and accepts nothing more."""


class WaitTimedOut(OversightError):
    """``wait(timeout=…)`` ran out before the operation was settled."""


class OperationEnded(OversightError):
    """The operation ended without the effect that was asked for."""

    @classmethod
    def of(cls, operation: dict) -> "OperationEnded":
        detail = operation["status_reason"] or operation["status"]
        return cls(None, operation["status"], detail, operation=operation)

    @property
    def result(self) -> dict:
        result = (self.operation or {}).get("result")
        return result if isinstance(result, dict) else {}


class Rejected(OperationEnded):
    """A reviewer rejected the operation: ``reason`` says why, or ``reply`` is what
    they asked the agent to consider instead (one of them is set)."""

    @property
    def reason(self) -> str | None:
        return self.result.get("reason")

    @property
    def reply(self) -> str | None:
        return self.result.get("reply")


class Expired(OperationEnded):
    """Nobody decided in time, or the approval lapsed before execution."""


class Cancelled(OperationEnded, RunClosed):
    """The run was cancelled (so was the operation, if it had not been executed)."""


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


ENDED = {
    "rejected": Rejected,
    "expired": Expired,
    "cancelled": Cancelled,
    "precondition_failed": PreconditionFailed,
    "failed": Failed,
    "rolled_back": VerificationFailed,
    "compensated": VerificationFailed,
    "alerted": VerificationFailed,
}
BY_STATUS = {
    401: Unauthorized,
    404: NotFound,
    409: Conflict,
    413: InvalidRequest,
    422: InvalidRequest,
}


def error_class(status: int, code: str, detail: str) -> type[OversightError]:
    """The exception for an error answer. The API answers ``run_closed`` both for a
    cancelled run and for an operation that expired before its claim: the detail
    says which."""
    if code == "stale_version":
        return StaleState
    if code == "run_closed":
        if " cancelled" in detail:
            return Cancelled
        return Expired if " expired" in detail else RunClosed
    return BY_STATUS.get(status, OversightError)


def error_from(status: int, body: bytes) -> OversightError:
    try:
        problem = json.loads(body)
        code, detail, field = problem["error"], problem["detail"], problem.get("field")
    except (ValueError, KeyError, TypeError):
        code, detail, field = "http_error", body.decode(errors="replace")[:500], None
    return error_class(status, code, detail)(status, code, detail, field)


def settled(operation: dict) -> bool:
    """Whether ``wait`` is done with ``operation``: committed, or (for an operation the
    agent executes) decided and not yet reported. Raises if it ended otherwise."""
    status = operation["status"]
    if status in ENDED:
        raise ENDED[status].of(operation)
    if status == "committed":
        return True
    if operation["executor"] != "agent":
        return False  # Oversight's workers are still on it
    if status == "verify_failed":
        raise VerificationFailed.of(operation)
    return status in ("approved", "in_flight")


# --- the client --------------------------------------------------------------------------


class _TryAgain(Exception):
    """An attempt failed on the way; the request may be sent again as it is, after
    ``after`` seconds if the server said how long to wait (Retry-After)."""

    def __init__(self, why: str, after: float = 0) -> None:
        super().__init__(why)
        self.after = after


@dataclass(frozen=True)
class Resume:
    """Where a run stands after a restart ("where was I?").

    ``case`` is ``no_decision`` (safe to decide again), ``decision_no_result`` (ask
    for the operation's state; repeat it only under its idempotency key) or
    ``result_and_checkpoint`` (continue from the stored result)."""

    case: str
    guidance: str
    run: dict
    operations: list[dict]


class Oversight:
    """A client for one token. ``base_url`` is the server's root (``/api/v1`` is
    added); ``timeout`` is how long one answer may take (beyond a long poll's wait);
    a request failing on the way is retried ``retries`` times, ``backoff`` seconds
    doubling each time."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 35,
        retries: int = 5,
        backoff: float = 0.5,
    ) -> None:
        base = base_url.rstrip("/")
        self.api = base if base.endswith("/api/v1") else f"{base}/api/v1"
        self.token, self.timeout, self.retries, self.backoff = token, timeout, retries, backoff

    # --- HTTP ------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        idempotency_key: str | None = None,
        query: dict | None = None,
        timeout: float | None = None,
        raw: bool = False,
    ) -> Any:
        """Send one API request, retried with the same Idempotency-Key while it fails
        on the way. Returns the decoded JSON (or the bytes, if ``raw``)."""
        url = self.api + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if method in MUTATING:
            headers["Idempotency-Key"] = idempotency_key or uuid.uuid4().hex
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        status, content = self._send(request, timeout or self.timeout)
        if status >= 400:
            raise error_from(status, content)
        return content if raw else json.loads(content)

    def _send(self, request: urllib.request.Request, timeout: float) -> tuple[int, bytes]:
        for attempt in range(self.retries + 1):
            try:
                return self._attempt(request, timeout)
            except _TryAgain as exc:
                failure = exc
            if attempt < self.retries:
                time.sleep(max(self.backoff * 2**attempt, failure.after))
        detail = f"{request.get_method()} {request.full_url}: {failure}"
        raise Unreachable(None, "unreachable", detail) from failure.__cause__

    @staticmethod
    def _attempt(request: urllib.request.Request, timeout: float) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            body = exc.read()
            if exc.code in RETRY_STATUSES or (exc.code == 409 and IN_PROGRESS in body):
                # Overloaded, or our earlier attempt of this very request is still running.
                raise _TryAgain(
                    f"HTTP {exc.code}", _seconds(exc.headers.get("Retry-After"))
                ) from exc
            return exc.code, body
        except (
            urllib.error.URLError,
            ConnectionError,
            TimeoutError,
            http.client.HTTPException,
        ) as exc:
            raise _TryAgain(str(exc) or type(exc).__name__) from exc

    # --- sessions and runs -----------------------------------------------------------

    def open_session(self, title: str = "", agent: str = "") -> dict:
        """Open a session (``agent`` defaults to the token's name)."""
        return self._request("POST", "/sessions", {"title": title, "agent": agent})

    def start_run(self, session_id: int, goal: str, retry_of: int | None = None) -> dict:
        """Start a run in a session; ``retry_of`` names a finished run this one retries."""
        body = {"session": session_id, "goal": goal, "retry_of": retry_of}
        return self._request("POST", "/runs", body)

    def run(self, run_id: int) -> dict:
        """The run: status, version, pending operations and recovery case."""
        return self._request("GET", f"/runs/{run_id}")

    def message(self, run_id: int, text: str, kind: str = "agent", data: dict | None = None) -> int:
        """Append a message to the run; returns its seq."""
        payload: dict[str, Any] = {"text": text}
        if data is not None:
            payload["data"] = data
        answer = self._request(
            "POST", f"/runs/{run_id}/messages", {"kind": kind, "payload": payload}
        )
        return answer["seq"]

    def finish(
        self, run_id: int, status: str, outcome: str = "", *, base_version: int | None = None
    ) -> dict:
        """End the run as ``completed``, ``partial`` or ``failed`` (the last two need an
        ``outcome``); with ``base_version``, only if the run has not moved on."""
        body = {"status": status, "outcome": outcome, "base_version": base_version}
        return self._request("POST", f"/runs/{run_id}/finish", body)

    def checkpoints(self, run_id: int, after: int = 0, limit: int = 100) -> list[dict]:
        """The run's audit checkpoints after seq ``after``, at most ``limit``."""
        query = {"after": after, "limit": limit}
        return self._request("GET", f"/runs/{run_id}/checkpoints", query=query)

    def resume(self, run_id: int) -> Resume:
        """Which recovery case the run is in, with its pending operations."""
        run = self.run(run_id)
        recovery = run["recovery"]
        return Resume(
            case=recovery["case"],
            guidance=recovery["guidance"],
            run=run,
            operations=run["pending_operations"],
        )

    # --- operations ------------------------------------------------------------------

    def propose(
        self,
        run_id: int,
        call_id: str,
        action: str,
        arguments: dict,
        *,
        rollback_kind: str,
        risk: str = "medium",
        base_version: int | None = None,
    ) -> dict:
        """Propose an operation. Idempotent on ``call_id``: proposing it again with the
        same arguments returns the existing operation, whatever happened since.

        ``base_version`` is the run version your decision was based on; if the run has
        moved on since, ``StaleState`` is raised so that you can read it and decide
        again. Without it, the proposal is based on the run as it is: the version is
        read just before, and read again if the run moves on in between."""
        body = {
            "call_id": call_id,
            "action": action,
            "arguments": arguments,
            "risk": risk,
            "rollback_kind": rollback_kind,
        }
        if base_version is not None:
            return self._request(
                "POST", f"/runs/{run_id}/operations", {**body, "base_version": base_version}
            )
        attempt = 1
        while True:
            current = self.run(run_id)["version"]
            try:
                return self._request(
                    "POST", f"/runs/{run_id}/operations", {**body, "base_version": current}
                )
            except StaleState:
                if attempt == STALE_ATTEMPTS:
                    raise
                time.sleep(0.05 * attempt)
                attempt += 1

    def operation(self, op_id: int, wait: int = 0, version: int | None = None) -> dict:
        """Read an operation; with ``wait`` (seconds), as soon as it changes from
        ``version`` (default: its version now), or after ``wait`` seconds as it is."""
        query: dict[str, int] = {"wait": wait}
        if version is not None:
            query["version"] = version
        timeout = max(self.timeout, wait + 5)
        return self._request("GET", f"/operations/{op_id}", query=query, timeout=timeout)

    def wait(self, op_id: int, *, timeout: float | None = None) -> dict:
        """Long-poll until the operation is settled and return it: committed, or (for
        one the agent executes) approved or in flight: ready to claim, or claimed.

        Raises ``Rejected``, ``Expired``, ``Cancelled``, ``PreconditionFailed``,
        ``Failed`` or ``VerificationFailed`` if it ended otherwise, and ``WaitTimedOut`` after
        ``timeout`` seconds (default: wait as long as it takes)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        operation = self.operation(op_id)
        while not settled(operation):
            poll = LONG_POLL_SECONDS
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    detail = f"operation {op_id} is still {operation['status']}"
                    raise WaitTimedOut(None, "timeout", detail, operation=operation)
                poll = min(poll, max(1, int(left)))
            operation = self.operation(op_id, wait=poll, version=operation["version"])
        return operation

    # --- operations the agent executes -----------------------------------------------

    def claim(self, op_id: int, lease_seconds: int = 60, executor: str = "") -> dict:
        """Take an approved operation with a lease. The answer's ``epoch`` fences the
        calls below; its ``intent``, if not None, says an earlier executor may have
        fired the effect (verify before doing it again); its ``status`` is
        ``verify_failed`` when that executor's rollback is still due. A cancelled run
        raises ``Cancelled``, one halted for reconciliation ``Conflict``."""
        body = {"lease_seconds": lease_seconds, "executor": executor}
        return self._request("POST", f"/operations/{op_id}/claim", body)

    def record_intent(self, op_id: int, epoch: int, snapshot: dict) -> dict:
        """Record what is about to be done (and what undo needs) before doing it, while
        the lease holds. Raises ``Cancelled`` once the run is cancelled (the operation
        is cancelled with it) and ``Conflict`` while it is halted for reconciliation:
        then do nothing."""
        body = {"epoch": epoch, "snapshot": snapshot}
        return self._request("POST", f"/operations/{op_id}/intent", body)

    def report(
        self,
        op_id: int,
        epoch: int,
        *,
        effect: str | None = None,
        verified: bool | None = None,
        output: Any = None,
        error: str = "",
    ) -> dict:
        """Report what verification showed, after the intent and while the lease holds.
        ``effect`` is ``applied`` (committed), ``absent`` (ended failed: the effect did
        not happen and cannot happen later; nothing to roll back) or ``uncertain`` (a
        verification failure: follow it with ``roll_back``). ``verified`` is the older
        form: True for applied, False for uncertain."""
        body = {"epoch": epoch, "output": output, "error": error}
        if effect is not None:
            body["effect"] = effect
        if verified is not None:
            body["verified"] = verified
        return self._request("POST", f"/operations/{op_id}/report", body)

    def roll_back(self, op_id: int, epoch: int, outcome: str, detail: str = "") -> dict:
        """After a verification failure: ``rolled_back`` or ``compensated`` once undone,
        or ``alert`` to halt the run until a person reconciles it. Report it before the
        lease lapses long: an operation left verify_failed is alerted by the server."""
        body = {"epoch": epoch, "outcome": outcome, "detail": detail}
        return self._request("POST", f"/operations/{op_id}/rollback", body)

    # --- artifacts -------------------------------------------------------------------

    def upload_artifact(
        self,
        run_id: int,
        name: str,
        content: bytes,
        media_type: str = "application/octet-stream",
    ) -> dict:
        """Attach bytes to the run; the answer carries their ``sha256``."""
        body = {
            "name": name,
            "media_type": media_type,
            "content_base64": base64.b64encode(content).decode(),
            "sha256": hashlib.sha256(content).hexdigest(),
        }
        return self._request("POST", f"/runs/{run_id}/artifacts", body)

    def fetch_artifact(self, sha256: str) -> bytes:
        """The bytes of an artifact of this token's project."""
        return self._request("GET", f"/artifacts/{sha256}", raw=True)

    # --- supervised tools ------------------------------------------------------------

    def tool(
        self,
        *,
        action: str,
        rollback_kind: str,
        risk: str = "medium",
        verify: Callable[[dict, str], bool | str] | None = None,
        undo: Callable[[dict, str], Any] | None = None,
        executor: str = "",
        lease_seconds: int = 60,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """A decorator that puts a function under oversight.

        The decorated function is called as ``tool(run_id, call_id, **arguments)``: it
        proposes ``action`` with ``arguments`` and waits for the decision (raising
        ``Rejected``, ``Expired``… as ``wait`` does). If Oversight's workers execute
        the action, it returns their committed result; the function is not called.

        Otherwise (an action the server does not know) the agent executes it: the
        operation is claimed (``executor`` names who, in the audit trail; default the
        token's name), its intent recorded, then ``fn(**arguments,
        idempotency_key=key)`` runs with the approved arguments (a reviewer may have
        edited them) and ``verify(arguments, key)`` re-reads the target, whether ``fn``
        returned or raised. ``verify`` answers ``"applied"``, ``"absent"`` (the effect
        did not happen and cannot happen later; a call that timed out and may still
        land is uncertain) or ``"uncertain"``; True means applied, False uncertain.

        - applied: reported, and ``fn``'s return value (JSON) returned (None if ``fn``
          raised: the effect is there all the same);
        - absent: reported, and ``Failed`` raised: nothing is undone, nothing was done;
        - uncertain: reported, then undone with ``undo(arguments, key)`` if given, else
          an alert halts the run for a person, and ``VerificationFailed`` raised.

        Agent-executed tools need ``verify``. The lease (``lease_seconds``) must outlast
        ``fn`` and ``verify``: a report after it lapsed is refused (``StaleState``), and
        the next call with the same call_id takes over and verifies.

        Calling again with the same run_id and call_id never repeats an effect: a
        committed operation returns its stored result without calling ``fn``, and if
        an earlier attempt recorded its intent (and may have fired the effect) before
        it was interrupted, ``verify`` is asked first: applied commits (the call then
        returns None: the earlier ``fn``'s value is lost), absent runs ``fn`` again
        under the same idempotency key, uncertain goes to the rollback plan as above.
        If that attempt's lease still holds, the call waits for it to lapse. If
        ``verify`` raises, the operation stays in flight for such a later call; if no
        call comes, the server alerts a person once the lease has lapsed for
        ``OVERSIGHT_AGENT_GRACE_SECONDS``.
        """

        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(fn)
            def supervised(run_id: int, call_id: str, **arguments: Any) -> Any:
                proposed = self.propose(
                    run_id, call_id, action, arguments, rollback_kind=rollback_kind, risk=risk
                )
                operation = self.wait(proposed["id"])
                if operation["status"] == "committed":
                    return stored_output(operation)
                if verify is None:
                    raise TypeError(f"{action} is executed by the agent: give the tool a verify")
                claim = self._claim_when_free(operation["id"], lease_seconds, executor)
                return Execution(self, operation, claim, fn, verify, undo).run()

            return supervised

        return decorate

    def _claim_when_free(self, op_id: int, lease_seconds: int, executor: str) -> dict:
        """Claim the operation. If an earlier executor still holds its lease (it may
        have died after firing the effect), wait for the lease to lapse and take over;
        the takeover's claim carries that executor's intent, so we verify first."""
        while True:
            try:
                return self.claim(op_id, lease_seconds, executor)
            except StaleState:
                current = self.operation(op_id)
                expires = current["lease"]["expires_at"]
                if current["status"] not in ("in_flight", "verify_failed") or not expires:
                    raise
                remaining = datetime.fromisoformat(expires) - datetime.now(UTC)
                time.sleep(max(0.2, remaining.total_seconds() + 0.2))


def stored_output(operation: dict) -> Any:
    """A committed operation's result: the agent's reported output, or the server's."""
    result = operation["result"]
    if operation["executor"] == "agent" and isinstance(result, dict):
        return result.get("output")
    return result


EFFECTS = ("applied", "absent", "uncertain")


def effect_of(answer: Any) -> str:
    """A ``verify`` answer as one of ``EFFECTS``: True is applied, False uncertain."""
    if isinstance(answer, bool):
        return "applied" if answer else "uncertain"
    if answer in EFFECTS:
        return str(answer)
    raise TypeError(f"verify must answer a bool or one of {EFFECTS}, not {answer!r}")


@dataclass(frozen=True)
class Execution:
    """Carrying out one claimed agent-executed operation."""

    client: Oversight
    operation: dict
    claim: dict
    fn: Callable[..., Any]
    verify: Callable[[dict, str], bool | str]
    undo: Callable[[dict, str], Any] | None

    @property
    def op_id(self) -> int:
        return self.operation["id"]

    @property
    def epoch(self) -> int:
        return self.claim["epoch"]

    @property
    def key(self) -> str:
        return self.claim["idempotency_key"]

    @property
    def arguments(self) -> dict:
        return self.claim["arguments"]

    def run(self) -> Any:
        """Verify an earlier attempt first; else record the intent, run, verify, report."""
        if self.claim.get("status") == "verify_failed":
            self._roll_back("an earlier attempt could not verify its effect")
        if self.claim["intent"] is not None:
            effect = self._verify()
            if effect == "applied":
                return self._commit(None)
            if effect == "uncertain":
                self._uncertain("on resume, verification cannot tell whether the effect happened")
        self.client.record_intent(self.op_id, self.epoch, {"function": self.fn.__qualname__})
        try:
            output = self.fn(**self.arguments, idempotency_key=self.key)
        except Exception as exc:
            return self._settle(None, f"{type(exc).__name__}: {exc}", exc)
        return self._settle(output, "")

    def _verify(self) -> str:
        return effect_of(self.verify(self.arguments, self.key))

    def _settle(self, output: Any, error: str, cause: Exception | None = None) -> Any:
        """Verify and report: commit, or raise ``Failed`` (absent) or, after the
        rollback plan, ``VerificationFailed`` (uncertain)."""
        effect = self._verify()
        if effect == "applied":
            return self._commit(output)
        name = self.fn.__qualname__
        if effect == "absent":
            why = error or f"{name} ran but its effect is not there"
            ended = self.client.report(self.op_id, self.epoch, effect="absent", error=why[:4000])
            raise Failed.of(ended) from cause
        self._uncertain(error or f"{name} ran but its effect could not be verified", cause)

    def _commit(self, output: Any) -> Any:
        self.client.report(self.op_id, self.epoch, effect="applied", output=output)
        return output

    def _uncertain(self, error: str, cause: Exception | None = None) -> NoReturn:
        """Report an uncertain effect, then follow the rollback plan."""
        self.client.report(self.op_id, self.epoch, effect="uncertain", error=error[:4000])
        self._roll_back(error, cause)

    def _roll_back(self, error: str, cause: Exception | None = None) -> NoReturn:
        """Undo the effect (or ask for an alert), and raise ``VerificationFailed``."""
        outcome, detail = self._undo(error)
        ended = self.client.roll_back(self.op_id, self.epoch, outcome, detail[:4000])
        raise VerificationFailed.of(ended) from cause

    def _undo(self, error: str) -> tuple[str, str]:
        """The rollback outcome to report, and why."""
        if self.undo is None:
            return "alert", f"{error}; the tool has no undo"
        try:
            self.undo(self.arguments, self.key)
        except Exception as exc:
            return "alert", f"{error}; undo failed: {type(exc).__name__}: {exc}"
        undone = (
            "compensated" if self.operation["rollback_kind"] == "compensating" else "rolled_back"
        )
        return undone, f"undone after: {error}"
