"""The Claude Agent SDK adapter's agent as a real process (tests/claude_agent_child.py)
killed with SIGKILL after the payment's effect, before anything reported it: restarted,
it resumes the session again, and the call is not made again. The CLI does not run an
interrupted call on resume: it tells the model so (and the gate would refuse the call
anyway: tests/test_claude_agent.py)."""

import signal
import subprocess
import sys

import pytest

from runs.models import AgentToken, Operation
from tests.fake_anthropic import FakeAnthropic, ScriptedModel, cli_env
from tests.helpers import decide_on
from tests.processes import ROOT, child_env, said

pytestmark = [pytest.mark.claude_cli, pytest.mark.timeout(120)]


def agent_process(base: str, token: str, api: FakeAnthropic, state, **env: str):
    return subprocess.Popen(
        [sys.executable, "tests/claude_agent_child.py", base, str(state)],
        cwd=ROOT,
        env={
            **child_env(),
            "PYTHONPATH": str(ROOT),
            "OVERSIGHT_TOKEN": token,
            **cli_env(api, str(state)),
            **env,
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_crash_after_the_effect_does_not_repeat_it(
    live_server, project, owner, reviewer, tmp_path
):
    """Restarted, the agent tells the model what Oversight knows of the interrupted call
    (the CLI itself says only that it may or may not have completed, "retry if
    needed"), and a model that makes the same call again is denied, told so again, in
    any later query of the agent too."""
    token = AgentToken.issue(project=project, name="claude-agent", owner=owner)[1]
    model = ScriptedModel("mcp__books__pay", {"invoice": "INV-7", "amount": 45}, "toolu_pay_1")
    ledger = tmp_path / "ledger.txt"
    with FakeAnthropic(model) as api:
        first = agent_process(live_server.url, token, api, tmp_path, CRASH_AFTER_EFFECT="1")
        try:
            assert said(first) == "waiting for reviewers"
            decide_on(Operation.objects.get(call_id="toolu_pay_1"), reviewer)
            assert first.wait(timeout=60) == -signal.SIGKILL
        finally:
            first.kill()
        assert ledger.read_text() == "INV-7 45\n"
        operation = Operation.objects.get(call_id="toolu_pay_1")
        assert (operation.status, operation.intent["tool_use_id"]) == ("in_flight", "toolu_pay_1")

        # The model pays again in the turn the CLI finishes first (which refuses every
        # call, a prompt being queued) and gives up; in the prompt's turn it pays
        # INV-8, which waits for reviewers, and then INV-7 again, in a later query.
        again = {"invoice": "INV-7", "amount": 45}
        inv_8 = {"invoice": "INV-8", "amount": 120}
        model.then = [("toolu_pay_2", again), None, ("toolu_pay_8", inv_8), ("toolu_pay_3", again)]
        restarted = agent_process(live_server.url, token, api, tmp_path)
        try:
            told = (
                "Your tool call toolu_pay_1 was interrupted when the agent stopped. It may "
                "have been made: a person is reconciling it. Do not retry it."
            )
            assert said(restarted) == "waiting for reviewers"
            assert any(told in str(r["messages"][-1]) for r in model.requests)  # the prompt
            decide_on(Operation.objects.get(call_id="toolu_pay_8"), reviewer)
            assert said(restarted) == (
                "Done: Read: PreToolUse:mcp__books__pay hook error: This call was not made: "
                f"it repeats one. {told}"
            )
            assert said(restarted).startswith("The run stays open: ")
            assert restarted.wait(timeout=30) == 0
        finally:
            restarted.kill()
    assert ledger.read_text() == "INV-7 45\nINV-8 120\n"  # INV-7 paid once
    assert sorted(Operation.objects.values_list("call_id", flat=True)) == [
        "toolu_pay_1",
        "toolu_pay_8",
    ]
    operation.refresh_from_db()
    # Not reported: Oversight cannot tell what a CLI tool did; once the lease lapses,
    # the server alerts a person to check.
    assert operation.status == "in_flight"


def test_killed_between_naming_its_session_and_proposing_it_goes_on_when_restarted(
    live_server, project, owner, tmp_path
):
    """Named first, proposed second: stopped in between, nothing waits for reviewers
    that nobody would resume, and the restarted agent resumes the named session (before,
    a proposal made but not named left the run waiting forever once approved)."""
    token = AgentToken.issue(project=project, name="claude-agent", owner=owner)[1]
    model = ScriptedModel("mcp__books__pay", {"invoice": "INV-7", "amount": 45}, "toolu_pay_1")
    marker = tmp_path / "crashed"
    with FakeAnthropic(model) as api:
        first = agent_process(live_server.url, token, api, tmp_path, CRASH_AFTER_NAMING=str(marker))
        try:
            assert first.wait(timeout=60) == -signal.SIGKILL
        finally:
            first.kill()
        assert marker.read_text() == "toolu_pay_1"
        assert not Operation.objects.exists()

        restarted = agent_process(live_server.url, token, api, tmp_path)
        try:
            # The CLI does not ask again for a call interrupted in its hook: it tells
            # the model the call was declined, and the session ends.
            assert said(restarted) == (
                "Done: Read: The user doesn't want to take this action right now. STOP what "
                "you are doing and wait for the user to tell you how to proceed."
            )
            assert restarted.wait(timeout=30) == 0
        finally:
            restarted.kill()
    assert not Operation.objects.filter(status="proposed").exists()
