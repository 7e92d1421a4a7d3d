"""The soak, at the suite's size (#38): an agent makes many supervised calls in one
run, as its own process under ``supervise``, while Oversight is cut off and back twice
and the agent is killed (SIGKILL) once, just after a call was approved. Every call ends
committed or rejected, each once; none is lost, none is made twice, none proposed
twice."""

import signal
from pathlib import Path

import pytest

from runs.models import AgentToken, Decision, Operation
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
    lines = (state / "ledger.txt").read_text().splitlines()
    return lines[0::2]


def test_openai_agents(live_server, project, owner, reviewer, tmp_path):
    token = AgentToken.issue(project=project, name="soak", owner=owner)[1]
    with Outage(live_server.url) as outage:

        def agent():
            return agent_child(
                "tests/openai_soak_child.py",
                outage.url,
                token,
                "soak",
                tmp_path,
                SOAK_CALLS=str(CALLS),
            )

        process = agent()
        try:
            for n in range(1, CALLS + 1):
                proposed = Operation.objects.filter(call_id=f"pay-{n}", status="proposed")
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
            assert said(process) == f"Done: {CALLS} answers"
            assert process.wait(timeout=30) == 0
        finally:
            process.kill()
    statuses = dict(Operation.objects.values_list("call_id", "status"))
    assert statuses == {
        f"pay-{n}": "rejected" if n in REJECTED else "committed" for n in range(1, CALLS + 1)
    }
    made = [f"INV-{n} {10 * n}" for n in range(1, CALLS + 1) if n not in REJECTED]
    assert payments(tmp_path) == made  # each once, in order
    assert outage.cuts == len(CUT_AFTER)
    assert Operation.objects.get(call_id="pay-1").run.status == "completed"
