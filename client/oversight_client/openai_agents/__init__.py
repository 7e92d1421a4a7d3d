"""The OpenAI Agents SDK with Oversight: function tools whose approval is Oversight's
(a proposal; a policy's auto-approval interrupts nothing, and is audited all the same),
executed once, verified and reported.

    pip install "oversight-client[openai-agents]"

Each ``Runner.run`` under ``in_run(run_id)`` proposes its tool calls in that Oversight
run, named by the SDK's call ids; ``OversightRunner`` does that and carries the run
across its interruptions."""

try:
    import agents  # noqa: F401
except ImportError as missing:  # pragma: no cover - depends on what is installed
    raise ImportError(
        "oversight_client.openai_agents needs the OpenAI Agents SDK: "
        'pip install "oversight-client[openai-agents]"'
    ) from missing

from oversight_client.in_run import current_run, in_run
from oversight_client.openai_agents.questions import question_tool
from oversight_client.openai_agents.runner import OversightRunner, supervise
from oversight_client.openai_agents.tools import supervised_function_tool

__all__ = [
    "OversightRunner",
    "current_run",
    "in_run",
    "question_tool",
    "supervise",
    "supervised_function_tool",
]
