"""Every API method once, as steps (see ``steps``): the sync ``Oversight`` and the async
``AsyncOversight`` drive these same generators, so their behaviour cannot drift apart.

Creates take ``idempotency_key`` (default: a fresh one); the retries of one call reuse
it. Pass your own (say, derived from your framework's thread and step) to make a create
safe to repeat after your process restarts."""

import base64
import functools
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from oversight_client.calls import Endpoint
from oversight_client.errors import Conflict, OversightError, StaleState, Unreachable
from oversight_client.follower import Follower, events_page, follow_feed, poll_page
from oversight_client.steps import Sleep, Steps
from oversight_client.waits import OPERATIONS, REQUESTS, in_reach, once

log = logging.getLogger(__name__)
OPEN_RUN = ("queued", "running", "waiting")
ABANDONED = "The agent gave up on this call while Oversight was out of reach: it was told no."
STALE_ATTEMPTS = 10  # proposals on "the run as it is" while workers keep moving it
RequestKind = Literal["question", "sign_off", "choice", "data"]


@dataclass(frozen=True)
class Resume:
    """Where a run stands after a restart ("where was I?").

    ``case`` is ``no_decision`` (safe to decide again), ``decision_no_result`` (ask for
    the operation's state; repeat it only under its idempotency key) or
    ``result_and_checkpoint`` (continue from the stored result)."""

    case: str
    guidance: str
    run: dict
    operations: list[dict]


def given(**fields: Any) -> dict:
    """The fields that were given (not None): the server's defaults apply to the rest."""
    return {name: value for name, value in fields.items() if value is not None}


def first(found: list[dict]) -> dict | None:
    return found[0] if found else None


class Core:
    """The methods of ``Oversight`` and ``AsyncOversight``, as step generators."""

    def __init__(self, endpoint: Endpoint, wait_timeout: float | None) -> None:
        self.endpoint, self.wait_timeout = endpoint, wait_timeout
        # A proposal gave up waiting for Oversight, and none got through since: the
        # next ones do not wait again (one outage costs an agent one wait, not one each).
        self.gave_up = False
        # The (run, call) of proposals given up: one may have reached Oversight with its
        # answer lost, and its model was told it was not made. Each is withdrawn once
        # Oversight answers again (``abandoned``), and never proposed again (``not_made``).
        self.abandoned: set[tuple[int, str]] = set()
        self.not_made: set[tuple[int, str]] = set()
        self.call = endpoint.call

    # --- sessions and runs -------------------------------------------------------------

    def open_session(
        self,
        title: str = "",
        agent: str = "",
        *,
        external_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> Steps[dict]:
        """Open a session (``agent`` defaults to the token's name). With ``external_id``
        (your framework's thread id, say), opening it again returns the same session."""
        body = given(title=title, agent=agent, external_id=external_id)
        return self.call("POST", "/sessions", body, idempotency_key=idempotency_key)

    def open_run(
        self, name: str, goal: str, *, title: str = "", patience: float | None = 0
    ) -> Steps[dict]:
        """The run named ``name``, in a session named so too: opened the first time,
        found again afterwards (by a restarted agent, say). ``patience`` as for
        ``propose``."""

        def opened() -> Steps[dict]:
            session = yield from self.open_session(title=title or goal[:200], external_id=name)
            return (yield from self.start_run(session["id"], goal=goal, external_id=name))

        return (yield from self._patiently(opened, patience))

    def find_session(self, external_id: str) -> Steps[dict | None]:
        """This token's session named ``external_id``, or None."""
        return first((yield from self.call("GET", "/sessions", query={"external_id": external_id})))

    def start_run(
        self,
        session_id: int,
        goal: str,
        retry_of: int | None = None,
        *,
        external_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> Steps[dict]:
        """Start a run in a session; ``retry_of`` names a finished run this one retries.
        With ``external_id``, starting it again returns the same run."""
        body = given(session=session_id, goal=goal, external_id=external_id)
        body["retry_of"] = retry_of
        return self.call("POST", "/runs", body, idempotency_key=idempotency_key)

    def find_run(self, external_id: str) -> Steps[dict | None]:
        """This token's run named ``external_id``, or None."""
        return first((yield from self.call("GET", "/runs", query={"external_id": external_id})))

    def run(self, run_id: int) -> Steps[dict]:
        """The run: status, version, pending operations and recovery case."""
        return self.call("GET", f"/runs/{run_id}")

    def messages(self, run_id: int, after: int = 0, limit: int = 100) -> Steps[list[dict]]:
        """The run's messages after seq ``after``, at most ``limit``, in order: what the
        user, the agent, the tools and Oversight said."""
        return self.call("GET", f"/runs/{run_id}/messages", query={"after": after, "limit": limit})

    def message(
        self,
        run_id: int,
        text: str,
        kind: str = "agent",
        data: dict | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> Steps[int]:
        """Append a message to the run (reviewers read it beside the proposals); returns
        its seq."""
        body = {"kind": kind, "payload": given(text=text, data=data)}
        path = f"/runs/{run_id}/messages"
        return (yield from self.call("POST", path, body, idempotency_key=idempotency_key))["seq"]

    def finish(
        self, run_id: int, status: str, outcome: str = "", *, base_version: int | None = None
    ) -> Steps[dict]:
        """End the run as ``completed``, ``partial`` or ``failed`` (the last two need an
        ``outcome``); with ``base_version``, only if the run has not moved on."""
        body = {"status": status, "outcome": outcome, "base_version": base_version}
        return self.call("POST", f"/runs/{run_id}/finish", body)

    def complete(self, run_id: int, *, patience: float | None = 0) -> Steps[dict]:
        """Finish the run as ``completed`` if it is still open (an admin may have
        cancelled it); one Oversight refuses to finish (an operation still in flight,
        say) is left open, with a warning. Returns the run as it is then. ``patience``
        as for ``propose``; the proposals given up before are withdrawn first."""
        run = yield from in_reach(lambda: self.run(run_id), patience)
        yield from self._withdraw_abandoned()
        if run["status"] not in OPEN_RUN:
            return run
        try:
            return (yield from in_reach(lambda: self.finish(run_id, "completed"), patience))
        except Conflict as refused:
            log.warning("run %s stays open: %s", run_id, refused.detail)
            return (yield from self.run(run_id))

    def checkpoints(self, run_id: int, after: int = 0, limit: int = 100) -> Steps[list[dict]]:
        """The run's audit checkpoints after seq ``after``, at most ``limit``."""
        query = {"after": after, "limit": limit}
        return self.call("GET", f"/runs/{run_id}/checkpoints", query=query)

    def resume(self, run_id: int) -> Steps[Resume]:
        """Which recovery case the run is in, with its pending operations."""
        run = yield from self.run(run_id)
        recovery = run["recovery"]
        return Resume(recovery["case"], recovery["guidance"], run, run["pending_operations"])

    # --- operations --------------------------------------------------------------------

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
        external_id: str | None = None,
        summary: str = "",
        rationale: str = "",
        idempotency_key: str | None = None,
        patience: float | None = 0,
    ) -> Steps[dict]:
        """Propose an operation; ``summary`` (one line) and ``rationale`` (why) are shown
        to the reviewer. Idempotent on ``call_id``: proposing it again with the same
        arguments returns the existing operation, whatever happened since.

        ``patience`` is how long the proposal waits for an Oversight out of reach beyond
        the client's ``retries``: proposed again, pausing longer each time, until that
        many seconds have passed (None: as long as it takes), then ``Unreachable``; once
        one proposal gave up, the next ones do not wait until one gets through. The
        framework adapters propose with the client's ``wait_timeout``: a tool call waits
        for Oversight as it waits for a person, and never ends the agent's process.

        ``base_version`` is the run version your decision was based on; if the run has
        moved on since, ``StaleState`` is raised so that you can read it and decide again.
        Without it, the proposal is based on the run as it is: the version is read just
        before, and read again if the run moves on in between. An ``idempotency_key`` of
        yours is sent with the base version added (``key@version``), so that repeating
        the proposal under it, after a restart, returns the same operation."""
        body = given(
            call_id=call_id,
            action=action,
            arguments=arguments,
            risk=risk,
            rollback_kind=rollback_kind,
            external_id=external_id,
            summary=summary or None,
            rationale=rationale or None,
        )
        proposing = functools.partial(self._propose, run_id, body, base_version, idempotency_key)
        try:
            operation = yield from self._patiently(proposing, patience)
        except Unreachable:
            if patience != 0:  # given up (not a plain proposal refused at once)
                self.abandoned.add((run_id, call_id))
                self.not_made.add((run_id, call_id))
            raise
        yield from self._withdraw_abandoned()
        return operation

    def _patiently[T](self, make: Callable[[], Steps[T]], patience: float | None) -> Steps[T]:
        """``make()``'s steps, made again while Oversight is out of reach until
        ``patience`` has passed (``waits.in_reach``); not waited for again once one
        such wait gave up, until one gets through (``gave_up``)."""
        try:
            result = yield from in_reach(make, 0 if self.gave_up else patience)
        except Unreachable:
            self.gave_up = self.gave_up or patience != 0
            raise
        self.gave_up = False
        return result

    def _withdraw_abandoned(self) -> Steps[None]:
        """Withdraw the proposals given up that reached Oversight all the same, each
        sent once (the others wait for the next time Oversight answers). One decided
        and under way already cannot be: a warning says so."""
        quick = Core(once(self.endpoint), None)
        for run_id, call_id in sorted(self.abandoned):
            try:
                found = yield from quick.find_operation(run_id=run_id, call_id=call_id)
                if found is not None:
                    yield from OPERATIONS.withdraw(quick.endpoint, found["id"], ABANDONED)
            except Conflict as late:
                log.warning("call %s, given up, could not be withdrawn: %s", call_id, late)
            except OversightError:
                continue  # asked again next time
            self.abandoned.discard((run_id, call_id))

    def _propose(
        self, run_id: int, body: dict, base_version: int | None, idempotency_key: str | None
    ) -> Steps[dict]:
        path = f"/runs/{run_id}/operations"
        for attempt in range(1, STALE_ATTEMPTS + 1):
            body["base_version"] = (
                (yield from self.run(run_id))["version"] if base_version is None else base_version
            )
            # Each base version makes another request, so another key: the caller's key
            # repeated after a restart (a newer version read) is not a reuse, and the
            # server's idempotency on call_id returns the same operation.
            key = idempotency_key and f"{idempotency_key}@{body['base_version']}"
            try:
                return (yield from self.call("POST", path, body, idempotency_key=key))
            except StaleState:
                if base_version is not None or attempt == STALE_ATTEMPTS:
                    raise
                yield Sleep(0.05 * attempt)
        raise AssertionError("unreachable")

    def find_operation(
        self,
        *,
        external_id: str | None = None,
        run_id: int | None = None,
        call_id: str | None = None,
    ) -> Steps[dict | None]:
        """This token's operation named ``external_id``, or proposed in ``run_id`` with
        ``call_id``; None if there is none."""
        if external_id is None and (run_id is None or call_id is None):
            raise TypeError("find_operation needs external_id, or run_id and call_id")
        query = given(external_id=external_id, run=run_id, call_id=call_id)
        return first((yield from self.call("GET", "/operations", query=query)))

    def operation(self, op_id: int, wait: int = 0, version: int | None = None) -> Steps[dict]:
        """Read an operation; with ``wait`` (seconds, at most the server's longest wait),
        as soon as it changes from ``version`` (default: its version now), or after
        ``wait`` seconds as it is."""
        return OPERATIONS.read(self.endpoint, op_id, wait, version)

    def wait(self, op_id: int, *, timeout: float | None = None) -> Steps[dict]:
        """Long-poll until the operation is settled and return it: committed, or (for one
        the agent executes) approved or in flight: ready to claim, or claimed.

        Raises ``Rejected``, ``Expired``, ``Cancelled``, ``PreconditionFailed``, ``Failed``
        or ``VerificationFailed`` if it ended otherwise. After ``timeout`` seconds
        (default: the client's ``wait_timeout``) it fails closed: the operation is
        withdrawn, so it never fires, and ``WaitTimedOut`` is raised; unless Oversight is
        already executing it, in which case the wait goes on until the outcome. A server
        out of reach meanwhile is polled again until then; any other end of the wait (an
        error, the task cancelled, Ctrl-C) withdraws the operation too, then goes on."""
        return OPERATIONS.wait(self.endpoint, op_id, self._timeout(timeout))

    def withdraw(self, op_id: int, reason: str = "") -> Steps[dict]:
        """Cancel a proposed or approved operation (it never fires). ``Conflict`` if it is
        already executing or has ended otherwise."""
        return OPERATIONS.withdraw(self.endpoint, op_id, reason)

    def actions(self) -> Steps[list[dict]]:
        """The actions Oversight executes itself: name, description, rollback kinds,
        arguments JSON Schema and precondition."""
        return self.call("GET", "/actions")

    # --- human requests ----------------------------------------------------------------

    def ask(
        self,
        run_id: int,
        prompt: str,
        *,
        kind: RequestKind | None = None,
        context: str = "",
        answer_schema: dict | None = None,
        choices: list[str] | None = None,
        external_id: str | None = None,
        expires_in: int | None = None,
        idempotency_key: str | None = None,
    ) -> Steps[dict]:
        """Ask the reviewers something Oversight does not execute, of one ``kind``:
        ``"question"`` (answered in words), ``"sign_off"`` (signed off or rejected),
        ``"choice"`` (one of ``choices``) or ``"data"`` (valid against ``answer_schema``).
        Without a kind: a choice with ``choices``, data with an ``answer_schema``, else a
        sign-off; a kind they contradict is refused (``InvalidRequest``). ``context`` is
        markdown. The run waits until it is answered (``answer``) or ``expires_in``
        seconds have passed."""
        body = given(
            prompt=prompt,
            kind=kind,
            context=context,
            answer_schema=answer_schema,
            choices=choices,
            external_id=external_id,
            expires_in=expires_in,
        )
        path = f"/runs/{run_id}/requests"
        return self.call("POST", path, body, idempotency_key=idempotency_key)

    def request(self, request_id: int, wait: int = 0, version: int | None = None) -> Steps[dict]:
        """Read a human request; with ``wait``, long-poll as ``operation`` does."""
        return REQUESTS.read(self.endpoint, request_id, wait, version)

    def answer(self, request_id: int, *, timeout: float | None = None) -> Steps[dict]:
        """Wait for the request's answer and return it: ``{request_kind, kind, by, at,
        comment, data}``: ``request_kind`` what was asked; ``kind`` approve (a sign-off),
        choose (a choice, ``data`` the chosen string) or answer (a question, ``data`` the
        text; or data, ``data`` valid against the schema). Raises ``Rejected``
        (``reason``), ``Expired`` or ``Cancelled``; after ``timeout`` (default:
        ``wait_timeout``) withdraws the request and raises ``WaitTimedOut``."""
        request = yield from REQUESTS.wait(self.endpoint, request_id, self._timeout(timeout))
        return request["answer"]

    def withdraw_request(self, request_id: int, reason: str = "") -> Steps[dict]:
        """Cancel an open request. ``Conflict`` if it has ended otherwise."""
        return REQUESTS.withdraw(self.endpoint, request_id, reason)

    def find_request(self, external_id: str) -> Steps[dict | None]:
        """This token's request named ``external_id``, or None."""
        query = {"external_id": external_id}
        return first((yield from self.call("GET", "/requests", query=query)))

    # --- the feed ----------------------------------------------------------------------

    def events_page(self, after: int = 0, wait: int = 0, limit: int = 100) -> Steps[dict]:
        """One page of the token's feed: ``{events, cursor}``, events after ``after`` in
        order; with ``wait``, as soon as there is one (or after ``wait`` seconds)."""
        return events_page(self.endpoint, after, wait, limit)

    def poll(self, follower: Follower, wait: int = 0) -> Steps[int]:
        """Let ``follower`` (a framework's resumer) handle one page of the feed; returns
        how many events resumed something (see ``follower``)."""
        return poll_page(self.endpoint, follower, wait)

    def follow(
        self, follower: Follower, stop: Callable[[], bool] = lambda: False, wait: int = 30
    ) -> Steps[None]:
        """Let ``follower`` handle the feed as it comes, until ``stop()``; Oversight out
        of reach pauses it instead of ending it (see ``follower``)."""
        return follow_feed(self.endpoint, follower, stop, wait)

    # --- operations the agent executes -------------------------------------------------

    def claim(self, op_id: int, lease_seconds: int = 60, executor: str = "") -> Steps[dict]:
        """Take an approved operation with a lease. The answer's ``epoch`` fences the
        calls below; its ``intent``, if not None, says an earlier executor may have fired
        the effect (verify before doing it again); its ``status`` is ``verify_failed`` when
        that executor's rollback is still due. A cancelled run raises ``Cancelled``, one
        halted for reconciliation ``Conflict``."""
        body = {"lease_seconds": lease_seconds, "executor": executor}
        return self.call("POST", f"/operations/{op_id}/claim", body)

    def record_intent(self, op_id: int, epoch: int, snapshot: dict) -> Steps[dict]:
        """Record what is about to be done (and what undo needs) before doing it, while
        the lease holds. Raises ``Cancelled`` once the run is cancelled (the operation is
        cancelled with it) and ``Conflict`` while it is halted for reconciliation: then
        do nothing."""
        body = {"epoch": epoch, "snapshot": snapshot}
        return self.call("POST", f"/operations/{op_id}/intent", body)

    def report(
        self,
        op_id: int,
        epoch: int,
        *,
        effect: str | None = None,
        verified: bool | None = None,
        output: Any = None,
        error: str = "",
    ) -> Steps[dict]:
        """Report what verification showed, after the intent and while the lease holds.
        ``effect`` is ``applied`` (committed, ``output`` kept for repeats and recovery),
        ``absent`` (ended failed: it did not happen and cannot happen later) or
        ``uncertain`` (a verification failure: follow it with ``roll_back``). ``verified``
        is the older form: True for applied, False for uncertain."""
        body = {"epoch": epoch, "output": output, "error": error}
        body |= given(effect=effect, verified=verified)
        return self.call("POST", f"/operations/{op_id}/report", body)

    def roll_back(self, op_id: int, epoch: int, outcome: str, detail: str = "") -> Steps[dict]:
        """After a verification failure: ``rolled_back`` or ``compensated`` once undone,
        or ``alert`` to halt the run until a person reconciles it. Report it before the
        lease lapses long: an operation left verify_failed is alerted by the server."""
        body = {"epoch": epoch, "outcome": outcome, "detail": detail}
        return self.call("POST", f"/operations/{op_id}/rollback", body)

    # --- artifacts ---------------------------------------------------------------------

    def upload_artifact(
        self,
        run_id: int,
        name: str,
        content: bytes,
        media_type: str = "application/octet-stream",
        *,
        idempotency_key: str | None = None,
    ) -> Steps[dict]:
        """Attach bytes to the run; the answer carries their ``sha256``."""
        body = {
            "name": name,
            "media_type": media_type,
            "content_base64": base64.b64encode(content).decode(),
            "sha256": hashlib.sha256(content).hexdigest(),
        }
        path = f"/runs/{run_id}/artifacts"
        return self.call("POST", path, body, idempotency_key=idempotency_key)

    def fetch_artifact(self, sha256: str) -> Steps[bytes]:
        """The bytes of an artifact of this token's project."""
        return self.call("GET", f"/artifacts/{sha256}", raw=True)

    def _timeout(self, given: float | None) -> float | None:
        return self.wait_timeout if given is None else given
