"""``OversightRunner``: an agent run carried across its interruptions by Oversight.

The paused ``RunState`` is stored on the Oversight run (an artifact, named by a message
of the run) and read back only from there: ``RunState.from_string`` does not
authenticate what it loads, so a state handed back by anyone else is never resumed.
Once reviewers decided every call it waits for, the state is resumed: approved calls
run (once, with the approved arguments), the others are rejected with what ended them,
a reviewer's reason included, for the model to read."""

import functools
from typing import Any

from agents import Agent, RunHooks, Runner, RunResult, RunState

from oversight_client.aio import AsyncOversight
from oversight_client.cursor import FileCursor
from oversight_client.errors import ENDED, RunClosed
from oversight_client.in_run import in_run
from oversight_client.lifecycle import goal_of, is_open, open_named, stopped
from oversight_client.openai_agents.questions import asked
from oversight_client.reach import patiently
from oversight_client.resuming import RunResumer, last_mark, say
from oversight_client.storable import storable
from oversight_client.told import as_text, not_proposed, outcome

STATE = "openai-agents-run-state.json"
MARK = "openai_agents_state"  # the data key of the run's message naming its stored state
FINAL = "final_output"  # with MARK None: the run ended, and what the agent concluded
# approved: the call's body carries on; verify_failed: its body rolls back what it left.
GOING_ON = ("approved", "in_flight", "verify_failed", "committed")
WAITING = ("proposed", "open")  # an operation, or a question, not yet decided


class RunMirror(RunHooks):
    """The agent's turns, as the reviewers read them beside its proposals: what each tool
    answered and what the agent concluded, as messages of the run. Best effort: a turn
    the server cannot take (Oversight out of reach) is logged, and the run goes on."""

    def __init__(self, ovs: AsyncOversight, run_id: int) -> None:
        self.ovs, self.run_id = ovs, run_id

    async def on_tool_end(self, context: Any, agent: Agent, tool: Any, result: object) -> None:
        await self.say("tool", f"{tool.name}: {as_text(result)}")

    async def on_agent_end(self, context: Any, agent: Agent, output: Any) -> None:
        await self.say("agent", as_text(output))

    async def say(self, kind: str, text: str) -> None:
        await say(self.ovs, self.run_id, kind, text)


class OversightRunner(RunResumer):
    """Runs ``agent`` in Oversight runs, with ``ovs`` (the supervised tools' client), and
    follows the token's feed to resume them as reviewers decide (``cursor``, e.g. a
    ``FileCursor``, keeps its place across restarts)."""

    def __init__(self, agent: Agent, ovs: AsyncOversight, cursor: FileCursor | None = None):
        super().__init__(ovs, cursor)
        self.agent = agent

    async def run(self, input: Any, run_id: int) -> RunResult | None:
        """Run the agent; its result, or None while calls wait for reviewers."""
        mirror = RunMirror(self.ovs, run_id)
        if isinstance(input, str):
            await mirror.say("user", input)
        with in_run(run_id):
            result = await Runner.run(self.agent, input, hooks=mirror)
        return await self._settle(run_id, result, mirror)

    async def recover(self, input: Any, run_id: int) -> RunResult | None:
        """After a restart, go on with the run where the process died: resume its stored
        state (as ``resume``), or run ``input`` again if the agent had not paused yet
        (its calls repeat no effect, being Oversight's operations named by their call
        ids: a model that names its calls afresh proposes them again). None once the
        run ended (``concluded`` says how) or while it waits."""
        marked, _, _ = await self._marks(run_id)
        if marked:
            return await self.resume(run_id)
        if (await self.ovs.run(run_id))["status"] == "cancelled":
            return None
        return await self.run(input, run_id)

    async def concluded(self, run_id: int) -> str | None:
        """What the agent concluded, as text, once its run ended under a runner."""
        return (await self._marks(run_id))[2]

    async def resume(self, run_id: int) -> RunResult | None:
        """Resume the run's stored state if every call it waits for is decided; its
        result, or None while it waits (again) or has nothing to resume."""
        return (await self._resume(run_id))[1]

    async def _resume(self, run_id: int) -> tuple[bool, RunResult | None]:
        """Whether the agent ran again, and its result if it ended. A cancelled run's
        agent never runs again."""
        if (await self.ovs.run(run_id))["status"] == "cancelled":
            return False, None
        _, sha256, _ = await self._marks(run_id)
        if sha256 is None:
            return False, None
        text = (await self.ovs.fetch_artifact(sha256)).decode()
        state = await RunState.from_string(self.agent, text)
        decided = []
        for item in state.get_interruptions():
            asked = await self._asked(run_id, item.raw_item.call_id)
            if asked is None or asked["status"] in WAITING:
                return False, None
            decided.append((item, asked))
        mirror = RunMirror(self.ovs, run_id)
        for item, operation in decided:
            if "action" not in operation or operation["status"] in GOING_ON:
                state.approve(item)  # a question's tool reads its answer
            else:
                await self._reject(
                    state, item, outcome(ENDED[operation["status"]].of(operation)), mirror
                )
        with in_run(run_id):
            result = await Runner.run(self.agent, state, hooks=mirror)
        return True, await self._settle(run_id, result, mirror)

    async def _settle(self, run_id: int, result: RunResult, mirror: RunMirror) -> RunResult | None:
        """Store the state of a run that waits for reviewers; mark one that ended. A
        resumed state stays named until then, so that a runner restarted after a crash
        resumes it again (its calls repeat no effect: they are Oversight's operations).
        A call the SDK paused on that Oversight was never asked about (the SDK asks no
        approval hook when the model's arguments are not a JSON object) is rejected at
        once, saying why: otherwise the run would wait for a decision nobody can make."""
        while result.interruptions:
            state, unasked = result.to_state(), []
            for item in result.interruptions:
                if await self._asked(run_id, item.raw_item.call_id) is None:
                    unasked.append(item)
            if not unasked:
                # Oversight away is waited for: the paused state lives only here until then.
                content = state.to_string().encode()
                storing = functools.partial(self._store, run_id, content)
                try:
                    await patiently(storing, self.ovs.wait_timeout)
                except RunClosed:  # cancelled meanwhile: nothing is to resume it
                    self.cancelled.add(run_id)
                return None
            for item in unasked:
                await self._reject(state, item, not_proposed(item.raw_item.arguments), mirror)
            with in_run(run_id):
                result = await Runner.run(self.agent, state, hooks=mirror)
        final = storable(as_text(result.final_output))
        try:
            said = {MARK: None, FINAL: final}
            await self.ovs.message(run_id, "The agent's run ended.", data=said)
        except RunClosed:  # cancelled as it ended: its result stands all the same
            self.cancelled.add(run_id)
        return result

    async def _asked(self, run_id: int, call_id: str) -> dict | None:
        """What the call paused for: its operation, or a question tool's request."""
        operation = await self.ovs.find_operation(run_id=run_id, call_id=call_id)
        return operation or await self.ovs.find_request(asked(run_id, call_id))

    async def _store(self, run_id: int, content: bytes) -> None:
        stored = await self.ovs.upload_artifact(run_id, STATE, content, "application/json")
        text = "The agent's run waits for reviewers; its state is stored with the run."
        await self.ovs.message(run_id, text, data={MARK: stored["sha256"]})

    @staticmethod
    async def _reject(state: RunState, item: Any, told: str, mirror: RunMirror) -> None:
        """Reject the call, telling the model why; the SDK answers the model without
        the tool (no ``on_tool_end``), so the answer is mirrored here."""
        state.reject(item, rejection_message=told)
        await mirror.say("tool", f"{item.raw_item.name}: {told}")

    async def _marks(self, run_id: int) -> tuple[bool, str | None, str | None]:
        """What the run's messages last said of its state: whether they said anything,
        the sha256 of the stored state (None: none waits), and the final output of a
        run that ended."""
        data = await last_mark(self.ovs, run_id, MARK)
        if data is None:
            return False, None, None
        return True, data[MARK], data.get(FINAL)


async def supervise(
    ovs: AsyncOversight,
    agent: Agent,
    input: Any,
    *,
    name: str,
    goal: str = "",
    cursor: FileCursor | None = None,
) -> RunResult | None:
    """The run's whole life in one call (``oversight_client.lifecycle``): ``agent`` runs
    ``input`` in the run named ``name`` (after a restart, it goes on where it stopped)
    and is resumed as reviewers decide. Its result, once it ended and the run is
    finished; None if the run was cancelled, or the agent had ended before this
    process started."""
    run_id = await open_named(ovs, name, goal or goal_of(input))
    runner = OversightRunner(agent, ovs, cursor)
    runner.feed.only = run_id  # one run's agent never resumes another's
    result = await runner.recover(input, run_id)
    if result is None and await runner.concluded(run_id) is None and await is_open(ovs, run_id):
        ended = (runner.results, runner.cancelled, runner.failed)
        await runner.follow(stop=lambda: any(run_id in them for them in ended))
        stopped(runner.feed, run_id)
        result = runner.results.get(run_id)
    run = await ovs.complete(run_id, patience=ovs.wait_timeout)
    return None if run["status"] == "cancelled" else result
