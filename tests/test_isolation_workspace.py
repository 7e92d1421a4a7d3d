"""Each project writes files in its own workspace (#11, hole 1): an agent of project B,
approved by B's own reviewer, cannot learn the hash of project A's file from a failed
precondition, overwrite it, or read A's bytes back through its "@before" artifact.
Everything here goes through the agent API and a worker, as the attack did."""

import pytest

from runs.actions.files import workspace_of
from runs.canonical import sha256_hex
from runs.models import Role
from tests.api_helpers import ServerAgent
from tests.conftest import make_user

pytest_plugins = ["tests.api_helpers"]

PATH = "notes/today.md"
A_SECRET = b"A's plan: acquire B on Monday\n"
B_NOTES = b"B's notes\n"


class Agent(ServerAgent):
    """An agent of one project that writes ``PATH``."""

    def write(self, call_id: str, content: bytes, expected: str | None) -> dict:
        arguments = {"path": PATH, "content": content.decode(), "expected_sha256": expected}
        return self.executed(call_id, "file.write", arguments, "in_band")

    def before_artifacts(self) -> list[str]:
        """The sha256 of each "@before" artifact the agent's run references, as its
        latest checkpoint lists them."""
        latest = self.api.get(f"/runs/{self.run}/checkpoints").json()[-1]
        return [
            seen["sha256"]
            for name, seen in latest["state"]["artifacts"].items()
            if name.endswith("@before")
        ]


@pytest.fixture
def agent_a(api, reviewer) -> Agent:
    """Project A's agent, which has written its secret file."""
    agent = Agent(api, reviewer)
    assert agent.write("a-1", A_SECRET, None)["status"] == "committed"
    return agent


@pytest.fixture
def agent_b(other_api, other_project) -> Agent:
    """Project B's agent; B's own reviewer approves (the token's owner may not)."""
    return Agent(other_api, make_user("b-reviewer", other_project, Role.REVIEWER))


def test_another_project_writing_the_same_path_never_touches_or_reveals_the_file(
    agent_a, agent_b, other_api
):
    a_sha = sha256_hex(A_SECRET)

    # B thinks the file is new: in its own workspace, it is.
    first = agent_b.write("b-1", B_NOTES, None)
    assert first["status"] == "committed", first["status_reason"]
    assert a_sha not in str(first)

    # B tries A's hash (learned elsewhere, or guessed): B's file does not have it.
    second = agent_b.write("b-2", b"overwritten by B\n", a_sha)
    assert second["status"] == "precondition_failed"
    assert f"(sha256 {sha256_hex(B_NOTES)}, approved against {a_sha})" in second["status_reason"]
    assert agent_b.before_artifacts() == []
    assert other_api.get(f"/artifacts/{a_sha}").status_code == 404

    # A's file is as A left it: A's next write, approved against it, finds it there,
    # and A's own "@before" artifact holds A's bytes.
    again = agent_a.write("a-2", b"A's plan, revised\n", a_sha)
    assert again["status"] == "committed", again["status_reason"]
    assert agent_a.api.get(f"/artifacts/{a_sha}").getvalue() == A_SECRET


def test_a_precondition_failure_reveals_only_the_projects_own_file(agent_a, agent_b):
    """B approved against a version of its own file that changed: the failure names B's
    hashes, never A's, and no server path."""
    v1, v2 = b"B v1\n", b"B v2\n"
    agent_b.write("b-1", v1, None)
    agent_b.write("b-2", v2, sha256_hex(v1))

    stale = agent_b.write("b-3", b"B v3\n", sha256_hex(v1))

    assert stale["status"] == "precondition_failed"
    assert stale["status_reason"] == (
        f"{PATH} has changed since it was approved "
        f"(sha256 {sha256_hex(v2)}, approved against {sha256_hex(v1)})"
    )
    assert sha256_hex(A_SECRET) not in str(stale)


def test_a_symlink_into_another_projects_workspace_is_refused(
    agent_a, agent_b, project, other_project, settings
):
    """Someone left a link in B's workspace to A's file: B's write through it is refused,
    A's file is untouched, and the refusal shows no server path."""
    link = workspace_of(other_project) / PATH
    link.parent.mkdir(parents=True)
    link.symlink_to(workspace_of(project) / PATH)

    refused = agent_b.write("b-1", b"through the link\n", sha256_hex(A_SECRET))

    assert refused["status"] == "precondition_failed"
    assert refused["status_reason"] == f"{PATH} leads outside the workspace"
    assert str(settings.OVERSIGHT_WORKSPACE) not in str(refused)
    assert (workspace_of(project) / PATH).read_bytes() == A_SECRET
