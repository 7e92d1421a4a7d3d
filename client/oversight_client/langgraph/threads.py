"""A LangGraph thread is an Oversight run (and session) named by the thread id."""

import functools

from langchain_core.runnables import RunnableConfig

from oversight_client.sync import Oversight


def thread_of(config: RunnableConfig) -> str:
    """The thread id of a graph's config; a supervised call needs one (a checkpointer)."""
    thread = (config.get("configurable") or {}).get("thread_id")
    if not thread:
        raise ValueError("a supervised tool runs in a thread: invoke the graph with a thread_id")
    return str(thread)


@functools.lru_cache(maxsize=4096)
def run_for_thread(ovs: Oversight, thread_id: str) -> int:
    """The id of the run named ``thread_id``: opened (session and run, both named by the
    thread) the first time, found again afterwards, by this process or another;
    Oversight out of reach is waited for, as a call waits for a person."""
    title = f"LangGraph thread {thread_id}"
    return ovs.open_run(thread_id, title, patience=ovs.wait_timeout)["id"]
