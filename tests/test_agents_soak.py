"""The soak, at the suite's size (#38), for each adapter: an agent makes many
supervised calls in one run, as its own process under ``supervise``, while Oversight is
cut off and back twice and the agent is killed (SIGKILL) once, just after a call was
approved. Every call ends committed or rejected, each once, in order; none is lost,
none is made twice, none proposed twice; the run completes."""

import signal
from pathlib import Path

import pytest

from runs.models import AgentToken, Decision, Operation
from tests.fake_anthropic import FakeAnthropic, ScriptedModel, cli_env
from tests.helpers import decide_on
from tests.outage import Outage
from tests.processes import agent_child, eventually, said

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

CALLS = 6
CUT_AFTER = (2, 5)  # Oversight is away for SHORT seconds once these calls are proposed
KILLED_AFTER = 3  # the agent is killed once this call is approved
REJECTED = (4,)
SHORT = 3


def payments(state: Path) -> list[str]:
    """The ledger's payments, without their keys (on a line of their own, or first)."""
    lines = (state / "ledger.txt").read_text().splitlines()
    paid = [line for line in lines if not line.startswith("[")]
    return [line if line.startswith("INV-") else line.partition(" ")[2] for line in paid]


def soak(child: str, call_id: str, live_server, token, reviewer, tmp_path, **env: str) -> str:
    """Run the soak with ``child``: decide each call ``call_id.format(n)`` as it is
    proposed, cut Oversight off and kill the agent on the way; what it concluded."""
    with Outage(live_server.url) as outage:

        def agent():
            return agent_child(child, outage.url, token, "soak", tmp_path, **env)

        process = agent()
        try:
            for n in range(1, CALLS + 1):
                proposed = Operation.objects.filter(call_id=call_id.format(n), status="proposed")
                operation = eventually(proposed.first, f"pay-{n} proposed", process)
                if n in CUT_AFTER:
                    outage.cut_for(SHORT)
                if n in REJECTED:
                    decide_on(operation, reviewer, Decision.Kind.REJECT, comment="not this one")
                else:
                    decide_on(operation, reviewer)
                if n == KILLED_AFTER:
                    process.send_signal(signal.SIGKILL)
                    assert process.wait(timeout=30) == -signal.SIGKILL
                    process = agent()
            concluded = said(process)
            assert process.wait(timeout=60) == 0
        finally:
            process.kill()
        assert outage.cuts == len(CUT_AFTER)
    statuses = dict(Operation.objects.values_list("call_id", "status"))
    assert statuses == {
        call_id.format(n): "rejected" if n in REJECTED else "committed" for n in range(1, CALLS + 1)
    }
    made = [f"INV-{n} {10 * n}" for n in range(1, CALLS + 1) if n not in REJECTED]
    assert payments(tmp_path) == made  # each once, in order
    assert Operation.objects.first().run.status == "completed"
    return concluded


@pytest.fixture
def token(project, owner) -> str:
    return AgentToken.issue(project=project, name="soak", owner=owner)[1]


def test_openai_agents(live_server, token, reviewer, tmp_path):
    child = "tests/openai_soak_child.py"
    concluded = soak(child, "pay-{}", live_server, token, reviewer, tmp_path, SOAK_CALLS=str(CALLS))
    assert concluded == f"Done: {CALLS} answers"


def test_langgraph(live_server, token, reviewer, tmp_path):
    child = "tests/langgraph_soak_child.py"
    concluded = soak(child, "pay-{}", live_server, token, reviewer, tmp_path, SOAK_CALLS=str(CALLS))
    assert concluded == f"Done: {CALLS} answers"


def test_agent_framework(live_server, token, reviewer, tmp_path):
    child = "tests/agent_framework_soak_child.py"
    concluded = soak(child, "pay-{}", live_server, token, reviewer, tmp_path, SOAK_CALLS=str(CALLS))
    assert concluded == f"Done: {CALLS} answers"


@pytest.mark.claude_cli
def test_claude_agent(live_server, token, reviewer, tmp_path):
    calls = [
        (f"toolu_pay_{n}", {"invoice": f"INV-{n}", "amount": 10 * n}) for n in range(1, CALLS + 1)
    ]
    model = ScriptedModel("mcp__books__pay", calls[0][1], calls[0][0])
    model.then = calls[1:]
    with FakeAnthropic(model) as api:
        child = "tests/claude_soak_child.py"
        env = cli_env(api, str(tmp_path))
        concluded = soak(child, "toolu_pay_{}", live_server, token, reviewer, tmp_path, **env)
    assert concluded.startswith("Read: ")
