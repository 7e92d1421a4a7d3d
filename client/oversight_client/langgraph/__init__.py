"""LangGraph with Oversight: supervised tools, a tool node that pauses the thread while
reviewers decide, graph interrupts answered in the reviewers' queue, and a resumer that
continues every thread once its decision is in.

    pip install "oversight-client[langgraph]"

Each LangGraph thread is an Oversight run named by the thread id (``external_id``),
opened on first use; each tool call is an operation named by the tool call's id."""

try:
    import langchain_core  # noqa: F401
    import langgraph  # noqa: F401
except ImportError as missing:  # pragma: no cover - depends on what is installed
    raise ImportError(
        'oversight_client.langgraph needs LangGraph: pip install "oversight-client[langgraph]"'
    ) from missing

from oversight_client.cursor import FileCursor
from oversight_client.langgraph.node import OversightToolNode
from oversight_client.langgraph.requests import ask_for, resume_value
from oversight_client.langgraph.resumer import Resumer, supervise
from oversight_client.langgraph.threads import run_for_thread
from oversight_client.langgraph.tools import SupervisedTool, supervised_tool

__all__ = [
    "FileCursor",
    "OversightToolNode",
    "Resumer",
    "SupervisedTool",
    "ask_for",
    "resume_value",
    "run_for_thread",
    "supervise",
    "supervised_tool",
]
