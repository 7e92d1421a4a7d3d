"""``OversightToolNode``: a ``ToolNode`` whose supervised calls wait for reviewers by
pausing the thread (``interrupt``), never by blocking a process."""

import asyncio
from collections.abc import Collection, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.prebuilt import ToolNode
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from oversight_client.errors import InvalidRequest, OperationEnded, RunClosed, Unreachable
from oversight_client.langgraph.threads import run_for_thread, thread_of
from oversight_client.langgraph.tools import SupervisedTool
from oversight_client.waits import operation_settled

MARK = "oversight"  # the key of this node's interrupt values: not a question for people


def undecided(operation: dict) -> bool:
    """Whether a call still waits, as the tool's own wait sees it: for reviewers, or for
    Oversight's workers to execute it or roll it back (its outcome is the answer)."""
    try:
        return not operation_settled(operation)
    except OperationEnded:
        return False  # the tool answers the model with how it ended


class OversightToolNode(ToolNode):
    """A drop-in ``ToolNode``: it proposes every supervised call of the last AI message
    and, while any is undecided, pauses the thread with one interrupt whose value is
    ``{"oversight": {"run", "thread", "operations"}}`` (a ``Resumer`` resumes it once they
    are all decided). Then the tools run as in a ``ToolNode``: approved calls execute
    (with a reviewer's edits), calls Oversight executed return their committed output,
    and a rejection answers the model with the reviewer's reason. Re-running the node,
    after a resume or a crash, proposes nothing twice and repeats no effect.

    Every tool must be supervised: a plain tool would run at once, in this node,
    unproposed and unaudited. One meant to (a search, a read) is named in
    ``unsupervised``; any other is refused here, naming it (``ValueError``)."""

    def __init__(self, tools: Sequence, *, unsupervised: Collection[str] = (), **kwargs):
        super().__init__(tools, **kwargs)
        named = set(unsupervised)
        plain = {n for n, t in self.tools_by_name.items() if not isinstance(t, SupervisedTool)}
        if unknown := sorted(named - plain):
            raise ValueError(
                f"OversightToolNode: unsupervised names {', '.join(unknown)}, which is not "
                "a plain tool of this node"
            )
        if loose := sorted(plain - named):
            raise ValueError(
                f"OversightToolNode: {', '.join(loose)} would run at once, unproposed and "
                "unaudited: make each a supervised_tool, or name it in unsupervised=[...]"
            )

    def waiting(self, input: Any, config: RunnableConfig) -> dict | None:
        """Propose the supervised calls; the interrupt value if any is undecided."""
        calls, _ = self._parse_input(input)
        proposals = []
        for call in calls:
            tool = self.tools_by_name.get(call["name"])
            if isinstance(tool, SupervisedTool):
                arguments = tool.arguments(call["args"])
                if arguments is not None:  # else the tool node answers the invalid call
                    proposals.append((tool, call["id"], arguments))
        if not proposals:
            return None
        thread = thread_of(config)
        try:
            run_id = run_for_thread(proposals[0][0].ovs, thread)
        except Unreachable:
            return None  # each tool answers the model that Oversight was out of reach
        pending = []
        for tool, call_id, arguments in proposals:
            try:
                operation = tool.propose(run_id, call_id, arguments)
            except (InvalidRequest, RunClosed, Unreachable):
                continue  # refused, the run is over, or given up: the tool says which
            if undecided(operation):
                pending.append(operation["id"])
        if not pending:
            return None
        return {MARK: {"run": run_id, "thread": thread, "operations": pending}}

    def _func(self, input: Any, config: RunnableConfig, runtime: Runtime) -> Any:
        while (value := self.waiting(input, config)) is not None:
            interrupt(value)  # one per round: calls from a thread pool would queue theirs
        return super()._func(input, config, runtime)

    async def _afunc(self, input: Any, config: RunnableConfig, runtime: Runtime) -> Any:
        while (value := await asyncio.to_thread(self.waiting, input, config)) is not None:
            interrupt(value)
        return await super()._afunc(input, config, runtime)


def is_ours(value: Any) -> bool:
    """Whether an interrupt value is this node's (not a question for people)."""
    return isinstance(value, dict) and isinstance(value.get(MARK), dict)
