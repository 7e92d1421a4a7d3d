"""An action the agent carries out itself is shown under the name it proposed: that
name cannot pass for a registered action's. Look-alike letters from other scripts,
zero-width characters, a trailing space or a right-to-left override are refused, and
so is a plain name that reads like a registered one (#35 item 9)."""

import pytest

from runs.models import Operation
from tests.api_helpers import agent_proposal, problem

pytest_plugins = ["tests.api_helpers"]


@pytest.fixture
def run_id(api) -> int:
    session = api.post("/sessions", {"title": "Names"}).json()["id"]
    return api.post("/runs", {"session": session, "goal": "Names"}).json()["id"]


@pytest.mark.parametrize(
    "name",
    [
        "f\u0456le.write",  # A Cyrillic i.
        "file.write\u200b",  # A zero-width space.
        "file.write ",
        "\u202eetirw.elif",  # A right-to-left override.
        "File.Write",
        ".file.write",
    ],
    ids=["cyrillic", "zero-width", "trailing-space", "rtl-override", "capitals", "leading-dot"],
)
def test_a_name_outside_lowercase_ascii_is_refused(api, run_id, name):
    body = problem(api.propose(run_id, agent_proposal(action=name)), 422, "action")

    assert "lowercase letters, digits" in body["detail"]
    assert not Operation.objects.exists()


@pytest.mark.parametrize("name", ["file_write", "fi1e.write", "flle.write", "ledger-transfer"])
def test_a_name_that_reads_like_a_registered_action_is_refused(api, run_id, name):
    body = problem(api.propose(run_id, agent_proposal(action=name)), 422, "action")

    assert "reads like the registered action" in body["detail"]
    assert not Operation.objects.exists()


@pytest.mark.parametrize("name", ["git.push", "crm.update", "vault.rotate_keys"])
def test_a_name_of_its_own_is_the_agents_to_carry_out(api, run_id, name):
    created = api.propose(run_id, agent_proposal(action=name))

    assert created.status_code == 201, created.content
    assert Operation.objects.get().executor == Operation.Executor.AGENT
