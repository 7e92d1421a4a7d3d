"""``OversightRunner``: an agent run carried across its interruptions by Oversight.

The paused ``RunState`` is stored on the Oversight run (an artifact, named by a message
of the run) and read back only from there: ``RunState.from_string`` does not
authenticate what it loads, so a state handed back by anyone else is never resumed.
Once reviewers decided every call it waits for, the state is resumed: approved calls
run (once, with the approved arguments), the others are rejected with what ended them,
a reviewer's reason included, for the model to read."""

from typing import Any

from agents import Agent, Runner, RunResult, RunState

from oversight_client.aio import AsyncOversight
from oversight_client.errors import ENDED
from oversight_client.openai_agents.tools import in_run
from oversight_client.told import outcome

STATE = "openai-agents-run-state.json"
MARK = "openai_agents_state"  # the data key of the run's message naming its stored state
GOING_ON = ("approved", "in_flight", "committed")  # approved: the call's body carries on


class OversightRunner:
    """Runs ``agent`` in Oversight runs, with ``ovs`` (the supervised tools' client)."""

    def __init__(self, agent: Agent, ovs: AsyncOversight) -> None:
        self.agent, self.ovs = agent, ovs

    async def run(self, input: Any, run_id: int) -> RunResult | None:
        """Run the agent; its result, or None while calls wait for reviewers."""
        with in_run(run_id):
            result = await Runner.run(self.agent, input)
        return await self._settle(run_id, result)

    async def resume(self, run_id: int) -> RunResult | None:
        """Resume the run's stored state if every call it waits for is decided; its
        result, or None while it still waits (or has nothing to resume)."""
        sha256 = await self._stored(run_id)
        if sha256 is None:
            return None
        text = (await self.ovs.fetch_artifact(sha256)).decode()
        state = await RunState.from_string(self.agent, text)
        decided = []
        for item in state.get_interruptions():
            operation = await self.ovs.find_operation(run_id=run_id, call_id=item.raw_item.call_id)
            if operation is None or operation["status"] == "proposed":
                return None
            decided.append((item, operation))
        for item, operation in decided:
            if operation["status"] in GOING_ON:
                state.approve(item)
            else:
                ended = ENDED[operation["status"]].of(operation)
                state.reject(item, rejection_message=outcome(ended))
        await self.ovs.message(run_id, "The agent's run resumed.", data={MARK: None})
        with in_run(run_id):
            result = await Runner.run(self.agent, state)
        return await self._settle(run_id, result)

    async def _settle(self, run_id: int, result: RunResult) -> RunResult | None:
        if not result.interruptions:
            return result
        content = result.to_state().to_string().encode()
        stored = await self.ovs.upload_artifact(run_id, STATE, content, "application/json")
        text = "The agent's run waits for reviewers; its state is stored with the run."
        await self.ovs.message(run_id, text, data={MARK: stored["sha256"]})
        return None

    async def _stored(self, run_id: int) -> str | None:
        """The sha256 of the state the run's messages last named (None: resumed since)."""
        named, after = None, 0
        while page := await self.ovs.messages(run_id, after, 100):
            for message in page:
                data = (message.get("payload") or {}).get("data") or {}
                if MARK in data:
                    named = data[MARK]
            after = page[-1]["seq"]
        return named
