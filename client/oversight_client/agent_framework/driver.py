"""``WorkflowDriver``: workflows carried across their pauses by Oversight.

Each workflow works in an Oversight run, its checkpoints kept there
(``OversightCheckpointStorage``). When it pauses, each pending ``request_info`` is put
to the reviewers: a supervised tool's approval request as a proposal (the framework's
call id as ``call_id``), anything else as a human request named by the request's id.
Following the token's feed, the driver resumes the workflow from its last checkpoint
with the responses that are ready: ``run(checkpoint_id=…, responses={request_id: …})``."""

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any

from agent_framework import Workflow, WorkflowCheckpoint, WorkflowEvent

from oversight_client.agent_framework.checkpoints import OversightCheckpointStorage
from oversight_client.agent_framework.conversation import mirror
from oversight_client.agent_framework.requests import (
    ENDED_REQUEST,
    Unusable,
    ask_for,
    is_tool_approval,
    response_for,
)
from oversight_client.agent_framework.tools import SupervisedTool
from oversight_client.aio import AsyncOversight
from oversight_client.cursor import FileCursor
from oversight_client.errors import InvalidRequest, OversightError, RunClosed, Unreachable
from oversight_client.follower import Follower, cancels, decides
from oversight_client.in_run import in_run
from oversight_client.lifecycle import goal_of, is_open, open_named, stopped
from oversight_client.reach import patiently
from oversight_client.resuming import say
from oversight_client.storable import storable

log = logging.getLogger(__name__)


class WorkflowDriver:
    """Runs the workflows ``build()`` makes (one per start or resume: a workflow runs
    one thing at a time) in Oversight runs, with ``ovs`` (the supervised tools'
    client), and follows the token's feed to resume them as reviewers decide and answer.
    ``tools`` are the ``SupervisedTool``s of its agents; ``cursor`` (e.g. a
    ``FileCursor``) keeps the driver's place in the feed across restarts."""

    def __init__(
        self,
        build: Callable[[], Workflow],
        ovs: AsyncOversight,
        *,
        tools: list[SupervisedTool] = (),  # type: ignore[assignment]
        cursor: FileCursor | None = None,
        allowed_checkpoint_types: list[str] | None = None,
    ) -> None:
        self.build, self.ovs = build, ovs
        self.proposals = {tool.name: tool.proposal for tool in tools}
        self.allowed_checkpoint_types = allowed_checkpoint_types
        self.feed = Follower(self._handle, lambda event: event["run"], cursor)
        self.outputs: dict[int, list[Any]] = {}  # the runs whose workflow ended, its outputs
        self.cancelled: set[int] = set()  # the runs an admin cancelled while it followed
        self._running: dict[int, asyncio.Lock] = {}

    def storage(self, run_id: int) -> OversightCheckpointStorage:
        allowed = [*self.declared_types, *(self.allowed_checkpoint_types or [])]
        return OversightCheckpointStorage(self.ovs, run_id, allowed_checkpoint_types=allowed)

    @functools.cached_property
    def declared_types(self) -> list[str]:
        """The types the workflow declares, allowed in its checkpoints without being
        named in ``allowed_checkpoint_types`` (``declared_types``)."""
        return declared_types(self.build())

    async def start(self, message: Any, run_id: int) -> list[Any] | None:
        """Run a new workflow on ``message`` in run ``run_id``; its outputs, or None while
        it waits for reviewers."""
        async with self._one_at_a_time(run_id):
            if isinstance(message, str):
                await say(self.ovs, run_id, "user", message)
            return await self._run(run_id, message=message)

    async def follow(self, stop: Callable[[], bool] = lambda: False, wait: int = 30) -> None:
        """Resume workflows as they are decided and answered, until ``stop()`` (asked
        between long polls of at most ``wait`` seconds); Oversight out of reach pauses,
        not ends, it."""
        await self.ovs.follow(self.feed, stop, wait)

    async def poll(self, wait: int = 0) -> int:
        """Handle one page of the feed; returns how many workflows were resumed. A
        workflow whose resume raises is logged and kept in ``failed``: it holds up no
        other."""
        return await self.ovs.poll(self.feed, wait)

    @property
    def failed(self) -> dict[int, str]:
        """Runs whose workflow could not go on, with why."""
        return self.feed.failed

    async def resume(self, run_id: int) -> list[Any] | None:
        """Resume the run's workflow with the responses that are ready (after a restart
        too, for a run it had started: a pause it had not put to the reviewers when it
        stopped is put now); its outputs once it ended, else None."""
        async with self._one_at_a_time(run_id):
            await self._resume(run_id)
        return self.outputs.get(run_id)

    async def _handle(self, event: dict) -> bool:
        """Whether the event's workflow ran again. One whose answer its type refuses
        ends its run, saying why."""
        if cancels(event):
            self.cancelled.add(event["run"])
        if not decides(event):
            return False
        try:
            async with self._one_at_a_time(event["run"]):
                return await self._resume(event["run"])
        except Unusable as unusable:
            await self._fail(event["run"], str(unusable))
            return False

    def _one_at_a_time(self, run_id: int) -> asyncio.Lock:
        """A run's workflow is run by one task at a time (``start``, ``resume`` and the
        feed may be called concurrently): two would restore the same checkpoint."""
        return self._running.setdefault(run_id, asyncio.Lock())

    async def _resume(self, run_id: int) -> bool:
        """Whether the workflow ran again: never in a run no longer open (cancelled,
        failed, finished)."""
        if not await patiently(functools.partial(is_open, self.ovs, run_id), self.ovs.wait_timeout):
            return False
        latest = await self.storage(run_id).latest()
        if latest is None:
            return False
        responses = {}
        for request_id, event in latest.pending_request_info_events.items():
            ready, response = await self._ready(run_id, event)
            if ready:
                responses[request_id] = response
        # Messages in flight: it stopped mid-step (the process died), so it goes on from
        # there; supervised calls repeat no effect.
        if not responses and not latest.messages:
            if latest.pending_request_info_events:
                await self._ask(run_id, latest)  # also after a crash before asking
            return False
        await self._run(run_id, checkpoint_id=latest.checkpoint_id, responses=responses or None)
        return True

    async def _ready(self, run_id: int, event: WorkflowEvent) -> tuple[bool, Any]:
        """Whether ``event`` can be responded to, and with what."""
        if self._supervised(event):
            # Decided, either way: the tool's body makes the call only if approved, and
            # otherwise tells the model why it was not made.
            return await self._decided(run_id, event), event.data.to_function_approval_response(
                True
            )
        request = await self._request(run_id, event)
        if request is None or request["status"] not in ENDED_REQUEST:
            return False, None
        return True, response_for(event, request)

    async def _run(self, run_id: int, **given: Any) -> list[Any] | None:
        storage = self.storage(run_id)
        with in_run(run_id):
            result = await self.build().run(checkpoint_storage=storage, **given)
        await mirror(self.ovs, run_id, result)
        if isinstance(storage.refused, Unreachable):
            raise storage.refused  # tried again from the last checkpoint stored
        if isinstance(storage.refused, RunClosed):  # cancelled meanwhile: it stops here
            self.cancelled.add(run_id)
            return None
        if storage.refused:  # what it did since cannot be resumed
            refused = f"{type(storage.refused).__name__}: {storage.refused}"
            await self._fail(run_id, f"The workflow's checkpoint could not be stored ({refused}).")
            return None
        # Oversight away is waited for: what the workflow waits for is put to reviewers.
        latest = await patiently(storage.latest, self.ovs.wait_timeout)
        if latest is None or not latest.pending_request_info_events:
            self.outputs[run_id] = result.get_outputs()
        elif await patiently(functools.partial(self._ask, run_id, latest), self.ovs.wait_timeout):
            await self._resume(run_id)
        return self.outputs.get(run_id)

    async def _ask(self, run_id: int, latest: WorkflowCheckpoint) -> bool:
        """Put each pending request to the reviewers, once each (proposals are named by
        the call id, requests by the request id); whether one is decided already (a
        policy approved it, or Oversight refused it)."""
        decided = False
        for event in latest.pending_request_info_events.values():
            if self._supervised(event):
                decided |= await self._decided(run_id, event)
            elif await self._request(run_id, event) is None:
                try:
                    name = request_name(run_id, event)
                    await self.ovs.ask(run_id, external_id=name, **ask_for(event))
                except InvalidRequest as invalid:
                    await self._fail(
                        run_id, f"Oversight refused the workflow's request: {invalid.detail}"
                    )
                    return False
        return decided

    async def _decided(self, run_id: int, event: WorkflowEvent) -> bool:
        """Whether the supervised call is decided, proposing it if it was not yet (also
        after a crash before proposing). Refused by Oversight, it is: its body will
        tell the model why."""
        call = event.data.function_call
        operation = await self.ovs.find_operation(run_id=run_id, call_id=call.call_id)
        if operation is None:
            arguments = call.parse_arguments() or {}
            proposal = self.proposals[call.name]
            try:
                operation = await self.ovs.propose(
                    run_id,
                    call.call_id,
                    arguments=arguments,
                    patience=self.ovs.wait_timeout,
                    **proposal,
                )
            except (InvalidRequest, RunClosed, Unreachable):
                return True  # refused, the run is over, or given up: the body says which
        return operation["status"] != "proposed"

    async def _request(self, run_id: int, event: WorkflowEvent) -> dict | None:
        """The human request ``event`` was put as in run ``run_id`` (None: not yet)."""
        request = await self.ovs.find_request(request_name(run_id, event))
        return request if request is not None and request["run"] == run_id else None

    def _supervised(self, event: WorkflowEvent) -> bool:
        return is_tool_approval(event.data) and event.data.function_call.name in self.proposals

    async def _fail(self, run_id: int, why: str) -> None:
        """End the run visibly: the workflow cannot go on, and the reviewers read why."""
        self.failed[run_id] = why
        try:
            await self.ovs.message(run_id, storable(why))
            await self.ovs.finish(run_id, "failed", why[:2000])
        except OversightError as error:
            log.warning("run %s could not be ended as failed (%s): %s", run_id, error, why)


def declared_types(workflow: Workflow) -> list[str]:
    """The types (``"module:qualname"``) the workflow's executors ask for and answer
    with (``request_info``'s response type, the request sent): its checkpoints hold
    them while they wait, and a checkpoint the framework cannot store would end the
    workflow with no outputs."""
    declared = set()
    for executor in workflow.executors.values():
        for pair in getattr(executor, "_response_handlers", {}):  # the framework's own
            declared.update(kind for kind in pair if isinstance(kind, type))
    return sorted(f"{kind.__module__}:{kind.__qualname__}" for kind in declared)


def request_name(run_id: int, event: WorkflowEvent) -> str:
    """The external id of the human request ``event`` is put as: named in its run, for
    a plain tool's request is named by the model's call id, which another run may share."""
    return f"run-{run_id}:{event.request_id}"


async def supervise(
    ovs: AsyncOversight,
    workflow: Callable[[], Workflow],
    input: Any,
    *,
    name: str,
    tools: list[SupervisedTool] = (),  # type: ignore[assignment]
    goal: str = "",
    cursor: FileCursor | None = None,
    allowed_checkpoint_types: list[str] | None = None,
) -> list[Any] | None:
    """The run's whole life in one call (``oversight_client.lifecycle``): the workflow
    ``workflow()`` builds runs ``input`` in the run named ``name`` (after a restart, it
    goes on from its last checkpoint) and is resumed as reviewers decide. Its outputs,
    once it ended and the run is finished; None if the run was cancelled or failed, or
    the workflow had ended before this process started."""
    run_id = await open_named(ovs, name, goal or goal_of(input))
    driver = WorkflowDriver(
        workflow, ovs, tools=tools, cursor=cursor, allowed_checkpoint_types=allowed_checkpoint_types
    )
    driver.feed.only = run_id  # one run's agent never resumes another's
    latest = await driver.storage(run_id).latest()
    outputs = await (driver.start(input, run_id) if latest is None else driver.resume(run_id))
    latest = await driver.storage(run_id).latest()
    waits = latest is not None and latest.pending_request_info_events
    if outputs is None and waits and run_id not in driver.failed and await is_open(ovs, run_id):
        ended = (driver.outputs, driver.cancelled, driver.failed)
        await driver.follow(stop=lambda: any(run_id in them for them in ended))
        if not await is_open(ovs, run_id):  # cancelled, or failed by the driver, saying why
            return None
        stopped(driver.feed, run_id)
        outputs = driver.outputs.get(run_id)
    run = await ovs.complete(run_id, patience=ovs.wait_timeout)
    return None if run["status"] == "cancelled" else outputs
