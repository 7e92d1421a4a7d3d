"""``OversightAgent``: Claude Agent SDK queries whose tool calls wait for reviewers
without holding a process: the ``PreToolUse`` hook defers a call still to be decided
(the CLI ends the query and keeps the session), names the session on the Oversight run,
and the agent follows the token's feed to resume it once the call is decided; the hook
then allows the call (with the reviewer's input) or denies it (with why).

A session is resumed with no prompt: the CLI then goes on with the call it deferred,
and defers the model's next supervised call in turn. (Resumed with a prompt, it would
take the prompt as a new turn as soon as the model's next call is deferred, and drop
that call: "[Tool result missing due to internal error]".) A session whose agent was
killed while a call ran goes on with that turn, and the CLI tells the model the call
may or may not have completed: a model that makes it again is told what Oversight
knows of it instead (made, with its output; or being reconciled by a person), and the
gate denies it the same call made again (in this agent's process; reviewers see the
same call made earlier on every operation's page)."""

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator, Collection, Mapping
from typing import Any

from claude_agent_sdk import (
    ClaudeAgentOptions,
    HookMatcher,
    ResultMessage,
    SystemMessage,
    query,
)

from oversight_client.aio import AsyncOversight
from oversight_client.claude_agent.gate import MARK, WAITING, Action, OversightGate
from oversight_client.cursor import FileCursor
from oversight_client.errors import Conflict, OversightError, RunClosed
from oversight_client.lifecycle import is_open, open_named, stopped
from oversight_client.resuming import RunResumer, last_mark
from oversight_client.storable import storable
from oversight_client.told import NOT_MADE, interrupted

ENDED = "The agent's session ended."
DROPPED = "The CLI dropped this call (it defers one per turn): the model may ask again."
LOST = "The agent stopped before its session could make this call: it was not made."
UNSTARTED = ("proposed", "approved", "rejected", "expired", "cancelled")  # no claim made
log = logging.getLogger(__name__)


class OversightAgent(RunResumer):
    """Runs ``options`` (the hooks of an ``OversightGate`` added to them) in Oversight
    runs, and follows the token's feed to resume the sessions whose deferred call was
    decided (``cursor``, e.g. a ``FileCursor``, keeps its place across restarts).
    ``quiet_seconds`` bounds a resume that finds no deferred call: a CLI that neither
    asks a hook nor says anything for that long waits for a prompt, and is told what
    Oversight knows of its call."""

    quiet_seconds = 30.0

    def __init__(
        self,
        ovs: AsyncOversight,
        actions: Mapping[str, Action],
        options: ClaudeAgentOptions,
        *,
        unsupervised: Collection[str] = (),
        cursor: FileCursor | None = None,
    ) -> None:
        super().__init__(ovs, cursor)
        self.actions, self.options, self.unsupervised = dict(actions), options, unsupervised
        # By run, the call interrupted while it ran (the agent stopped) that may have
        # been made: the gate denies the same call made again, in every later query.
        self.interrupted: dict[int, dict] = {}

    async def run(self, prompt: str, run_id: int) -> ResultMessage | None:
        """Run the query; its result, or None while a call waits for reviewers."""
        await self.ovs.message(run_id, storable(prompt), kind="user")
        return await self._query(run_id, None, prompt)

    async def resume(self, run_id: int) -> ResultMessage | None:
        """Resume the run's deferred session if its call is decided; the result, or
        None while it waits (again) or there is nothing to resume."""
        return (await self._resume(run_id))[1]

    async def recover(self, prompt: str, run_id: int) -> ResultMessage | None:
        """After a restart, go on where the agent stopped: resume the session named on
        the run once its call is decided, or at once if the call was never proposed
        (the agent stopped in between), or run ``prompt`` again if no session was named
        yet. None while it waits, or once it ended."""
        if (await self.ovs.run(run_id))["status"] == "cancelled":
            return None
        marked = await last_mark(self.ovs, run_id, MARK)
        if marked is None:
            return await self.run(prompt, run_id)
        deferred = marked[MARK]
        if deferred is None:
            return None
        operation = await self.ovs.find_operation(run_id=run_id, call_id=deferred["call"])
        if operation is not None and operation["status"] == "proposed":
            return None
        return await self._go_on(run_id, deferred, operation)

    async def _resume(self, run_id: int) -> tuple[bool, ResultMessage | None]:
        """Whether the session was resumed, and its result if it ended. A cancelled
        run's agent never runs again."""
        if (await self.ovs.run(run_id))["status"] == "cancelled":
            return False, None
        deferred = await self._deferred_call(run_id)  # None: ended since
        if not isinstance(deferred, dict):
            return False, None
        operation = await self.ovs.find_operation(run_id=run_id, call_id=deferred["call"])
        if operation is None or operation["status"] == "proposed":
            return False, None
        # Named until its query ends (or defers another call): an agent stopped on the
        # way resumes it again, and the gate never allows a call twice.
        return True, await self._go_on(run_id, deferred, operation)

    async def _go_on(
        self, run_id: int, deferred: dict, operation: dict | None
    ) -> ResultMessage | None:
        """Resume the session. Deferred, the CLI goes on with no prompt, with its call
        (whose hook says what was decided). Stopped inside its turn (the call never
        proposed, or allowed and running), it waits for a prompt and first finishes
        that turn, saying the call was interrupted: the prompt says what Oversight
        knows of the call, and the gate denies the model the same call made again."""
        session, told = session_of(deferred), interrupted(deferred["call"], operation)
        if operation is not None and operation["status"] in UNSTARTED:
            return await self._query(run_id, session, None, told, lost=operation)
        if operation is not None and operation["status"] not in NOT_MADE:
            self.interrupted[run_id] = operation  # may have been made: never again
        return await self._query(run_id, session, told)

    async def _query(
        self,
        run_id: int,
        session: str | None,
        prompt: str | None,
        otherwise: str = "",
        *,
        lost: dict | None = None,
    ) -> ResultMessage | None:
        """Run or resume (``session``) a query. With no ``prompt``, a CLI that turns out
        to have nothing to go on with is told ``otherwise``, and ``lost`` (its call's
        operation) is withdrawn if it waits."""
        gate = OversightGate(
            self.ovs,
            run_id,
            self.actions,
            unsupervised=self.unsupervised,
            repeated=self.interrupted.get(run_id),
        )
        quiet = Quiet(otherwise, self.quiet_seconds)
        hooks = {**(self.options.hooks or {})}
        heard = {"PreToolUse": [HookMatcher(hooks=[quiet.heard_hook])]}
        for added in (heard, gate.hooks(defer=True)):
            for event, matchers in added.items():
                hooks[event] = [*hooks.get(event, []), *matchers]
        options = dataclasses.replace(self.options, hooks=hooks, resume=session)
        result: Any = None
        try:
            async for message in query(prompt=quiet if prompt is None else prompt, options=options):
                if not isinstance(message, SystemMessage):  # the CLI is under way
                    quiet.heard.set()
                if isinstance(message, ResultMessage):
                    result = message
                    quiet.ended.set()
        finally:
            quiet.ended.set()
        kept = result.deferred_tool_use.id if result and result.deferred_tool_use else None
        await self._withdraw_dropped(gate, kept, lost if quiet.told else None)
        try:
            if kept is not None:
                deferred = {"session": result.session_id, "call": kept}
                if await self._deferred_call(run_id) != deferred:  # the hook named another
                    await self.ovs.message(run_id, WAITING, data={MARK: deferred})
                return None
            said = result.result if result is not None and result.result else ENDED
            await self.ovs.message(run_id, storable(said), kind="agent", data={MARK: None})
        except RunClosed:  # cancelled meanwhile: never resumed again
            self.cancelled.add(run_id)
        return result if kept is None else None

    async def _withdraw_dropped(self, gate: OversightGate, kept: str | None, lost: dict | None):
        """Withdraw what nobody will make: the calls this query deferred that the CLI did
        not keep (it defers one call per turn and drops the others), and a call decided
        for a session that turned out to have lost it."""
        dropped = [(op_id, DROPPED) for call, op_id in gate.deferred.items() if call != kept]
        if lost is not None and lost["status"] in ("proposed", "approved"):
            dropped.append((lost["id"], LOST))
        for op_id, why in dropped:
            try:
                await self.ovs.withdraw(op_id, why)
            except Conflict:  # decided and ended meanwhile
                pass
            except OversightError as error:  # reviewers see it was not made once it expires
                log.warning("operation %s could not be withdrawn: %s", op_id, error)

    async def waits(self, run_id: int) -> bool:
        """Whether the run's session waits for a call to be decided (it has not ended)."""
        return isinstance(await self._deferred_call(run_id), dict)

    async def _deferred_call(self, run_id: int) -> Any:
        """The session and call the run waits for, as its messages last named them
        (None: resumed since)."""
        return ((await last_mark(self.ovs, run_id, MARK)) or {}).get(MARK)


async def supervise(
    ovs: AsyncOversight,
    options: ClaudeAgentOptions,
    prompt: str,
    *,
    name: str,
    actions: Mapping[str, Action],
    unsupervised: Collection[str] = (),
    goal: str = "",
    cursor: FileCursor | None = None,
) -> ResultMessage | None:
    """The run's whole life in one call (``oversight_client.lifecycle``): ``prompt`` is
    run in the run named ``name`` (after a restart, the agent goes on where it stopped)
    with ``options`` and the gate's hooks, and resumed as reviewers decide. Its result,
    once it ended and the run is finished; None if the run was cancelled, or the
    session had ended before this process started."""
    run_id = await open_named(ovs, name, goal or prompt)
    agent = OversightAgent(ovs, actions, options, unsupervised=unsupervised, cursor=cursor)
    agent.feed.only = run_id  # one run's agent never resumes another's
    result = await agent.recover(prompt, run_id)
    if result is None and await agent.waits(run_id) and await is_open(ovs, run_id):
        ended = (agent.results, agent.cancelled, agent.failed)
        await agent.follow(stop=lambda: any(run_id in them for them in ended))
        stopped(agent.feed, run_id)
        result = agent.results.get(run_id)
    run = await ovs.complete(run_id, patience=ovs.wait_timeout)
    return None if run["status"] == "cancelled" else result


class Quiet:
    """The prompt of a resumed session: none, so that the CLI goes on with the call it
    deferred. Its input stays open until the query's result (the hooks are answered on
    it). A CLI that had no deferred call waits for a prompt: if it neither asks a hook
    nor says anything within ``seconds``, it is sent ``otherwise``."""

    def __init__(self, otherwise: str, seconds: float) -> None:
        self.otherwise, self.seconds, self.told = otherwise, seconds, False
        self.heard, self.ended = asyncio.Event(), asyncio.Event()

    async def heard_hook(self, *_: Any) -> dict:
        self.heard.set()
        return {}

    async def __aiter__(self) -> AsyncIterator[dict]:
        try:
            await asyncio.wait_for(self.heard.wait(), self.seconds)
        except TimeoutError:
            self.told = True
            message = {"role": "user", "content": self.otherwise}
            yield {"type": "user", "message": message, "parent_tool_use_id": None}
        await self.ended.wait()


def session_of(deferred: dict) -> str:
    """The stored session id, only as a UUID: never a CLI option."""
    return str(uuid.UUID(deferred["session"]))
