"""``Resumer``: one process that follows the token's feed and resumes every paused
thread whose proposals or questions were decided, and asks the reviewers the questions
a thread's ``interrupt()`` raises."""

from collections.abc import Callable
from typing import Any

from langgraph.types import Command, Interrupt

from oversight_client.cursor import FileCursor
from oversight_client.follower import Follower, cancels, decides
from oversight_client.langgraph.node import MARK, is_ours, undecided
from oversight_client.langgraph.requests import ask_for, resume_value
from oversight_client.langgraph.threads import run_for_thread
from oversight_client.lifecycle import stopped
from oversight_client.sync import Oversight

ENDED_REQUEST = ("answered", "rejected", "expired")  # cancelled: the run was, or we withdrew


class Resumer:
    """Resumes ``graph``'s threads as Oversight decides (``graph`` has a checkpointer;
    its threads are the runs ``ovs``'s token opened). A cancelled run's thread is never
    resumed; ``cancelled`` lists the threads whose run an admin cancelled while it
    followed (a ``stop`` for ``follow`` reads it without asking Oversight, which may be
    out of reach). Without a ``cursor``, the feed is followed from its start."""

    def __init__(self, graph: Any, ovs: Oversight, cursor: FileCursor | None = None) -> None:
        self.graph, self.ovs = graph, ovs
        self.feed = Follower(self.handle, lambda event: event["run_external_id"], cursor)
        self.cancelled: set[str] = set()

    def start(self, input: Any, thread_id: str) -> Any:
        """Invoke the graph on a thread and ask the reviewers what it interrupts with."""
        result = self.graph.invoke(input, config(thread_id))
        self.ask(thread_id)
        return result

    def follow(self, stop: Callable[[], bool] = lambda: False, wait: int = 30) -> None:
        """Handle the feed's events as they come, until ``stop()`` (asked between long
        polls of at most ``wait`` seconds); Oversight out of reach pauses it."""
        self.ovs.follow(self.feed, stop, wait)

    def poll(self, wait: int = 0) -> int:
        """Handle one page of the feed; returns how many threads were resumed. A thread
        whose resume raises (a node's error, a question's answer its schema refuses) is
        logged and kept in ``failed``; one thread never holds up the others."""
        return self.ovs.poll(self.feed, wait)

    @property
    def failed(self) -> dict[str, str]:
        """Threads whose last resume raised, with the error: tried again on their next
        event, or by ``recover()``."""
        return self.feed.failed

    def handle(self, event: dict) -> bool:
        """Resume the event's thread if the event decided something it waits for."""
        thread = event["run_external_id"]
        if thread and cancels(event):
            self.cancelled.add(thread)
        return bool(thread) and decides(event) and self.resume(thread)

    def resume(self, thread_id: str) -> bool:
        """Resume the thread's interrupts that are decided; then ask the reviewers what
        it waits for and was not asked yet (also after a crash before asking). Returns
        whether it was resumed: never if its run was cancelled."""
        if self._cancelled(thread_id):
            return False
        values = {}
        for interrupt in self.graph.get_state(config(thread_id)).interrupts:
            ready, value = self.ready(interrupt)
            if ready:
                values[interrupt.id] = value
        if values:
            self.graph.invoke(Command(resume=values), config(thread_id))
        self.ask(thread_id)
        return bool(values)

    def recover(self, thread_id: str) -> bool:
        """After a restart: continue the thread if it stopped between steps (the process
        died mid-step, or a node raised: nodes under Oversight repeat no effect), else
        resume it as ``resume`` does. Not for graphs with static breakpoints
        (``interrupt_before``/``interrupt_after``), which stop between steps on purpose."""
        if self._cancelled(thread_id):
            return False
        paused = self.graph.get_state(config(thread_id))
        if paused.next and not paused.interrupts:
            self.graph.invoke(None, config(thread_id))
            self.ask(thread_id)
            return True
        return self.resume(thread_id)

    def _cancelled(self, thread_id: str) -> bool:
        """Whether the thread's run was cancelled, as Oversight says now; kept in
        ``cancelled`` (after a restart, the feed's cursor may be past the cancel)."""
        run = self.ovs.find_run(thread_id)
        if run is not None and run["status"] == "cancelled":
            self.cancelled.add(thread_id)
        return thread_id in self.cancelled

    def ready(self, interrupt: Interrupt) -> tuple[bool, Any]:
        """Whether ``interrupt`` can be resumed, and with what. A paused tool node is
        resumed once all its operations are decided (it reads them again)."""
        if is_ours(interrupt.value):
            pending = interrupt.value[MARK]["operations"]
            return not any(undecided(self.ovs.operation(pk)) for pk in pending), True
        request = self.ovs.find_request(interrupt.id)
        if request is None or request["status"] not in ENDED_REQUEST:
            return False, None
        return True, resume_value(interrupt.value, request)

    def ask(self, thread_id: str) -> list[dict]:
        """Ask the reviewers each question the thread is paused on (once each: the
        request is named by the interrupt's id)."""
        asked = []
        for interrupt in self.graph.get_state(config(thread_id)).interrupts:
            if is_ours(interrupt.value):
                continue
            request = self.ovs.find_request(interrupt.id)
            if request is None:
                run_id = run_for_thread(self.ovs, thread_id)
                request = self.ovs.ask(run_id, external_id=interrupt.id, **ask_for(interrupt))
            asked.append(request)
        return asked


def config(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id}}


def supervise(
    ovs: Oversight, graph: Any, input: Any, *, name: str, cursor: FileCursor | None = None
) -> dict | None:
    """The run's whole life in one call (``oversight_client.lifecycle``): ``graph`` runs
    ``input`` on the thread ``name``, the run named after it (with a checkpointer that
    outlives the process, a restart goes on where the thread stopped), and is resumed
    as reviewers decide. The thread's last values, once it ended and the run is
    finished; None if the run was cancelled."""
    resumer, thread = Resumer(graph, ovs, cursor), config(name)
    resumer.feed.only = name  # one run's agent never resumes another's
    run_id = run_for_thread(ovs, name)
    if graph.get_state(thread).values:
        resumer.recover(name)
    else:
        resumer.start(input, name)
    ended = (resumer.cancelled, resumer.failed)
    resumer.follow(stop=lambda: not graph.get_state(thread).next or any(name in e for e in ended))
    stopped(resumer.feed, name)
    run = ovs.complete(run_id, patience=ovs.wait_timeout)
    return None if run["status"] == "cancelled" else graph.get_state(thread).values
