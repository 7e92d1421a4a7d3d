"""``OversightAgent``: Claude Agent SDK queries whose tool calls wait for reviewers
without holding a process: the ``PreToolUse`` hook defers a call still to be decided
(the CLI ends the query and keeps the session), names the session on the Oversight run,
and the agent follows the token's feed to resume it once the call is decided; the hook
then allows the call (with the reviewer's input) or denies it (with why)."""

import contextlib
import dataclasses
import uuid
from collections.abc import Collection, Mapping
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, query

from oversight_client.aio import AsyncOversight
from oversight_client.claude_agent.gate import MARK, WAITING, Action, OversightGate
from oversight_client.cursor import FileCursor
from oversight_client.errors import Conflict
from oversight_client.resuming import RunResumer, last_mark
from oversight_client.storable import storable

CARRY_ON = "Your tool call was decided; carry on."
ENDED = "The agent's session ended."
DROPPED = "The CLI defers one call per turn and dropped this one: the model may ask again."


class OversightAgent(RunResumer):
    """Runs ``options`` (the hooks of an ``OversightGate`` added to them) in Oversight
    runs, and follows the token's feed to resume the sessions whose deferred call was
    decided (``cursor``, e.g. a ``FileCursor``, keeps its place across restarts).
    ``resume_prompt`` is the user message the resumed session goes on with, once the
    deferred call has been allowed or denied."""

    def __init__(
        self,
        ovs: AsyncOversight,
        actions: Mapping[str, Action],
        options: ClaudeAgentOptions,
        *,
        unsupervised: Collection[str] = (),
        cursor: FileCursor | None = None,
        resume_prompt: str = CARRY_ON,
    ) -> None:
        super().__init__(ovs, cursor)
        self.actions, self.options = dict(actions), options
        self.unsupervised, self.resume_prompt = unsupervised, resume_prompt

    async def run(self, prompt: str, run_id: int) -> ResultMessage | None:
        """Run the query; its result, or None while a call waits for reviewers."""
        await self.ovs.message(run_id, storable(prompt), kind="user")
        return await self._query(prompt, run_id, None)

    async def resume(self, run_id: int) -> ResultMessage | None:
        """Resume the run's deferred session if its call is decided; the result, or
        None while it waits (again) or there is nothing to resume."""
        return (await self._resume(run_id))[1]

    async def recover(self, prompt: str, run_id: int) -> ResultMessage | None:
        """After a restart, go on where the agent stopped: resume the session named on
        the run once its call is decided, or at once if the call was never proposed
        (the agent stopped in between: its hook proposes it now), or run ``prompt``
        again if no session was named yet. None while it waits, or once it ended."""
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
        return await self._query(self.resume_prompt, run_id, session_of(deferred))

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
        return True, await self._query(self.resume_prompt, run_id, session_of(deferred))

    async def _query(self, prompt: str, run_id: int, session: str | None) -> ResultMessage | None:
        gate = OversightGate(self.ovs, run_id, self.actions, unsupervised=self.unsupervised)
        hooks = {**(self.options.hooks or {})}
        for event, matchers in gate.hooks(defer=True).items():
            hooks[event] = [*hooks.get(event, []), *matchers]
        options = dataclasses.replace(self.options, hooks=hooks, resume=session)
        result: Any = None
        async for message in query(prompt=prompt, options=options):
            if isinstance(message, ResultMessage):
                result = message
        if result is not None and result.deferred_tool_use is not None:
            await self._deferred(run_id, gate, result)
            return None
        said = result.result if result is not None and result.result else ENDED
        await self.ovs.message(run_id, storable(said), kind="agent", data={MARK: None})
        return result

    async def _deferred(self, run_id: int, gate: OversightGate, result: ResultMessage) -> None:
        """Name the call the session waits for (the hook did, unless the turn had other
        calls). The CLI defers one call per turn: the others of the turn it drops (they
        never run), so their proposals are withdrawn."""
        kept = result.deferred_tool_use.id
        deferred = {"session": result.session_id, "call": kept}
        if await self._deferred_call(run_id) != deferred:  # the hook named another
            await self.ovs.message(run_id, WAITING, data={MARK: deferred})
        for call_id, op_id in gate.deferred.items():
            if call_id != kept:
                with contextlib.suppress(Conflict):  # decided and ended meanwhile
                    await self.ovs.withdraw(op_id, DROPPED)

    async def _deferred_call(self, run_id: int) -> Any:
        """The session and call the run waits for, as its messages last named them
        (None: resumed since)."""
        return ((await last_mark(self.ovs, run_id, MARK)) or {}).get(MARK)


def session_of(deferred: dict) -> str:
    """The stored session id, only as a UUID: never a CLI option."""
    return str(uuid.UUID(deferred["session"]))
