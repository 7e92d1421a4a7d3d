"""``OversightRunner``: an agent run carried across its interruptions by Oversight.

The paused ``RunState`` is stored on the Oversight run (an artifact, named by a message
of the run) and read back only from there: ``RunState.from_string`` does not
authenticate what it loads, so a state handed back by anyone else is never resumed.
Once reviewers decided every call it waits for, the state is resumed: approved calls
run (once, with the approved arguments), the others are rejected with what ended them,
a reviewer's reason included, for the model to read."""

from typing import Any

from agents import Agent, RunHooks, Runner, RunResult, RunState

from oversight_client.aio import AsyncOversight
from oversight_client.cursor import FileCursor
from oversight_client.errors import ENDED
from oversight_client.follower import RunFollower, last_marked
from oversight_client.openai_agents.tools import in_run
from oversight_client.told import as_text, outcome

STATE = "openai-agents-run-state.json"
MESSAGE_CHARS = 20_000  # a mirrored turn, at most (the server takes 100,000)
MARK = "openai_agents_state"  # the data key of the run's message naming its stored state
GOING_ON = ("approved", "in_flight", "committed")  # approved: the call's body carries on


class RunMirror(RunHooks):
    """The agent's turns, as the reviewers read them beside its proposals: what each tool
    answered and what the agent concluded, as messages of the run."""

    def __init__(self, ovs: AsyncOversight, run_id: int) -> None:
        self.ovs, self.run_id = ovs, run_id

    async def on_tool_end(self, context: Any, agent: Agent, tool: Any, result: object) -> None:
        await self._say("tool", f"{tool.name}: {as_text(result)}")

    async def on_agent_end(self, context: Any, agent: Agent, output: Any) -> None:
        await self._say("agent", as_text(output))

    async def _say(self, kind: str, text: str) -> None:
        cut = text if len(text) <= MESSAGE_CHARS else f"{text[: MESSAGE_CHARS - 1]}…"
        await self.ovs.message(self.run_id, cut, kind=kind)


class OversightRunner(RunFollower):
    """Runs ``agent`` in Oversight runs, with ``ovs`` (the supervised tools' client), and
    follows the token's feed to resume them as reviewers decide (``cursor``, e.g. a
    ``FileCursor``, keeps its place across restarts)."""

    def __init__(self, agent: Agent, ovs: AsyncOversight, cursor: FileCursor | None = None):
        super().__init__(ovs, cursor)
        self.agent = agent

    async def run(self, input: Any, run_id: int) -> RunResult | None:
        """Run the agent; its result, or None while calls wait for reviewers."""
        if isinstance(input, str):
            await self.ovs.message(run_id, input, kind="user")
        with in_run(run_id):
            result = await Runner.run(self.agent, input, hooks=RunMirror(self.ovs, run_id))
        return await self._settle(run_id, result)

    async def resume(self, run_id: int) -> RunResult | None:
        """Resume the run's stored state if every call it waits for is decided; its
        result, or None while it waits (again) or has nothing to resume."""
        return (await self._resume(run_id))[1]

    async def _resume(self, run_id: int) -> tuple[bool, RunResult | None]:
        """Whether the agent ran again, and its result if it ended. A cancelled run's
        agent never runs again."""
        if (await self.ovs.run(run_id))["status"] == "cancelled":
            return False, None
        sha256 = await last_marked(self.ovs, run_id, MARK)  # None: resumed since
        if sha256 is None:
            return False, None
        text = (await self.ovs.fetch_artifact(sha256)).decode()
        state = await RunState.from_string(self.agent, text)
        decided = []
        for item in state.get_interruptions():
            operation = await self.ovs.find_operation(run_id=run_id, call_id=item.raw_item.call_id)
            if operation is None or operation["status"] == "proposed":
                return False, None
            decided.append((item, operation))
        for item, operation in decided:
            if operation["status"] in GOING_ON:
                state.approve(item)
            else:
                ended = ENDED[operation["status"]].of(operation)
                state.reject(item, rejection_message=outcome(ended))
        await self.ovs.message(run_id, "The agent's run resumed.", data={MARK: None})
        with in_run(run_id):
            result = await Runner.run(self.agent, state, hooks=RunMirror(self.ovs, run_id))
        return True, await self._settle(run_id, result)

    async def _settle(self, run_id: int, result: RunResult) -> RunResult | None:
        if not result.interruptions:
            return result
        content = result.to_state().to_string().encode()
        stored = await self.ovs.upload_artifact(run_id, STATE, content, "application/json")
        text = "The agent's run waits for reviewers; its state is stored with the run."
        await self.ovs.message(run_id, text, data={MARK: stored["sha256"]})
        return None
