"""The Microsoft Agent Framework with Oversight: workflows whose checkpoints Oversight
keeps, whose ``request_info`` questions reviewers answer, and whose agents' tools
(``approval_mode="always_require"``) reviewers approve, reject or edit; an approved call
executed once, verified and reported.

    pip install "oversight-client[agent-framework]"

``WorkflowDriver`` starts workflows in Oversight runs and resumes them as reviewers
decide; an agent runs in a workflow of its own: ``WorkflowBuilder(start_executor=agent)``."""

try:
    import agent_framework  # noqa: F401
except ImportError as missing:  # pragma: no cover - depends on what is installed
    raise ImportError(
        "oversight_client.agent_framework needs the Agent Framework: "
        'pip install "oversight-client[agent-framework]"'
    ) from missing

from oversight_client.agent_framework.checkpoints import OversightCheckpointStorage
from oversight_client.agent_framework.driver import WorkflowDriver, supervise
from oversight_client.agent_framework.tools import SupervisedTool, supervised_tool
from oversight_client.in_run import in_run

__all__ = [
    "OversightCheckpointStorage",
    "SupervisedTool",
    "WorkflowDriver",
    "in_run",
    "supervise",
    "supervised_tool",
]
