"""End to end with real processes: the web server, a worker, and an agent using only
``oversight_client``. People decide from the test (as the pages would, through the
services). The agent is SIGKILLed mid-run — once while it waits, once right after an
effect fired and before it was reported — and restarted: it resumes the same run,
never proposes again and never repeats an effect."""

import signal
import subprocess
import sys

import pytest
from django.utils import timezone

from runs.actors import Actor
from runs.models import Operation
from runs.services.decisions import decide, expire_if_due
from runs.services.runs import cancel_run
from runs.services.tokens import issue_token
from tests.processes import ROOT, Output, child_env, listening_port, manage_started, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


class Agent:
    def __init__(self, base: str, token: str, state_dir, **env: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "tests/e2e_agent.py", base, str(state_dir)],
            cwd=ROOT,
            env={**child_env(), "PYTHONPATH": str(ROOT), "OVERSIGHT_AGENT_TOKEN": token, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def expect(self, prefix: str) -> str:
        line = self.process.stdout.readline().strip()
        if not line.startswith(prefix):
            self.kill()
            raise AssertionError(f"{line!r}, not {prefix!r}: {self.process.stderr.read()[-3000:]}")
        return line

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)


def proposed(call_id: str) -> Operation:
    waiting = Operation.objects.filter(call_id=call_id, status="proposed")
    return wait_until(waiting.first, message=f"{call_id} proposed")


def approve(op: Operation, reviewer, **changes) -> None:
    kind = "edit" if changes else "approve"
    arguments = {**op.arguments, **changes} if changes else None
    decide(
        operation=op,
        reviewer=reviewer,
        kind=kind,
        arguments_hash=op.arguments_hash,
        arguments=arguments,
    )


@pytest.fixture
def servers(project, owner):
    """The web server, on the port the system gave it, and a worker; an agent's token."""
    web = manage_started("runserver", "--noreload", "127.0.0.1:0", stderr=subprocess.DEVNULL)
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    processes = [web, manage_started("runworker", "--idle-seconds", "0.1", **quiet)]
    try:
        web_port = listening_port(Output(web.stdout), web)
        _, token = issue_token(
            project=project, name="e2e", issued_by=owner, owner_username=owner.username
        )
        yield f"http://127.0.0.1:{web_port}", token
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=10)


def test_agent_survives_kills_and_never_repeats_itself(servers, tmp_path, reviewer, admin_user):
    base, token = servers
    agent = Agent(base, token, tmp_path)
    agent.expect("started")
    approve(proposed("a"), reviewer)
    agent.expect("fired first")
    agent.expect("approved {'appended': 'first'}")
    approve(proposed("file"), reviewer)
    agent.expect("server committed")
    op = proposed("b")
    decide(
        operation=op,
        reviewer=reviewer,
        kind="reply",
        arguments_hash=op.arguments_hash,
        comment="Not that one; write the third instead.",
    )
    agent.expect("reply Not that one")
    proposed("c")
    agent.kill()  # While it waits for a decision.

    agent = Agent(base, token, tmp_path)
    agent.expect("resumed no_decision")
    # Steps already done answer from what is stored: nothing is proposed or fired again.
    agent.expect("approved {'appended': 'first'}")
    agent.expect("server committed")
    agent.expect("reply Not that one")
    approve(proposed("c"), reviewer, line="third, edited")
    agent.expect("fired third, edited")
    agent.expect("edited {'appended': 'third, edited'}")
    op = proposed("d")
    expire_if_due(op, timezone.now() + timezone.timedelta(days=30))
    agent.expect("expired")
    proposed("e")
    cancel_run(run=op.run, actor=Actor.of_user(admin_user), reason="enough for today")
    agent.expect("cancelled")
    assert agent.process.wait(timeout=20) == 0

    notes = (tmp_path / "notes.txt").read_text().splitlines()
    assert [line.split(" [")[0] for line in notes] == ["first", "third, edited"]
    counts = {call: Operation.objects.filter(call_id=call).count() for call in "abcde"}
    assert counts == dict.fromkeys("abcde", 1)
    assert Operation.objects.get(call_id="file").status == "committed"


def test_agent_killed_after_its_effect_verifies_instead_of_repeating(servers, tmp_path, reviewer):
    base, token = servers
    agent = Agent(base, token, tmp_path, DIE_AFTER_EFFECT="first")
    agent.expect("started")
    approve(proposed("a"), reviewer)
    agent.expect("fired first")
    assert agent.process.wait(timeout=10) == -signal.SIGKILL

    agent = Agent(base, token, tmp_path)
    agent.expect("resumed decision_no_result")
    # Verified on resume: the call returns what verify read back from the notes.
    agent.expect("approved {'appended': 'first'}")
    agent.kill()

    assert len((tmp_path / "notes.txt").read_text().splitlines()) == 1
    op = Operation.objects.get(call_id="a")
    assert op.status == "committed" and op.result["verified"] is True
    assert op.checkpoints.filter(to_status="committed").count() == 1
