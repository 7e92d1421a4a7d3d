"""The Claude Agent SDK with Oversight: a tool call runs only once a reviewer approved
it in Oversight, with the input they approved (edited, maybe).

    pip install "oversight-client[claude-agent-sdk]"

``OversightGate`` answers the SDK's ``can_use_tool`` and a ``PreToolUse`` hook for the
tools it maps to Oversight actions; ``OversightAgent`` runs queries whose hook defers a
call waiting for reviewers (the session ends and is kept), and follows the token's feed
to resume the session once the call is decided."""

try:
    import claude_agent_sdk  # noqa: F401
except ImportError as missing:  # pragma: no cover - depends on what is installed
    raise ImportError(
        "oversight_client.claude_agent needs the Claude Agent SDK: "
        'pip install "oversight-client[claude-agent-sdk]"'
    ) from missing

from oversight_client.claude_agent.agent import OversightAgent, supervise
from oversight_client.claude_agent.gate import Action, OversightGate

__all__ = ["Action", "OversightAgent", "OversightGate", "supervise"]
