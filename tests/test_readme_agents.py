"""The agent examples of the README and the docs run as written: the code blocks marked
``<!-- tested: … -->`` (the README's ten lines, the client's sync and async examples, one
per framework) are extracted and run, as their own processes with
the installed client, against a live server while a reviewer decides and answers."""

import os
import re
import subprocess
import sys
from contextlib import ExitStack

import pytest

from runs.models import AgentToken, Decision, Operation
from tests.client_helpers import answering, deciding
from tests.documentation import everything
from tests.fake_anthropic import FakeAnthropic, ScriptedModel, cli_env

EXAMPLE = re.compile(r"<!-- tested: (\w+) [^>]*-->\n```python\n(.*?)```", re.DOTALL)


def examples() -> dict[str, str]:
    return dict(EXAMPLE.findall(everything()))


@pytest.fixture
def run_example(live_server, project, owner, tmp_path):
    token = AgentToken.issue(project=project, name="readme", owner=owner)[1]
    env = {**os.environ, "OVERSIGHT_URL": live_server.url, "OVERSIGHT_TOKEN": token}

    def run(name: str, **more_env: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", examples()[name]],
            cwd=tmp_path,
            env={**env, **more_env},
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    return run


def test_the_chapter_marks_its_examples():
    assert set(examples()) == {
        "quickstart",
        "sync",
        "async",
        "langgraph",
        "openai_agents",
        "agent_framework",
        "claude_agent",
    }


def test_the_langgraph_example_is_under_30_lines_of_code():
    lines = [line for line in examples()["langgraph"].splitlines() if line.strip()]
    assert len(lines) < 30


def test_the_readmes_ten_lines(run_example, reviewer):
    lines = [line for line in examples()["quickstart"].splitlines() if line.strip()]
    assert len(lines) <= 15  # ten of them the agent's own, beside imports and the stand-in
    with deciding(reviewer, "pay-1"):
        shown = run_example("quickstart")
    assert shown == "{'paid': 'INV-7'}\n"
    op = Operation.objects.get(call_id="pay-1")
    assert (op.status, op.summary, op.run.status) == (
        "committed",
        "Pay a supplier invoice.",
        "completed",
    )


def test_the_sync_example(run_example, reviewer, tmp_path):
    with answering(reviewer, "choose", data="savings"), deciding(reviewer, "note-1"):
        shown = run_example("sync")
    assert shown == "{'appended': '42 paid from savings'}\n"
    op = Operation.objects.get(call_id="note-1")
    assert (op.status, op.summary) == ("committed", "Append a line to the team's notes.")
    assert (tmp_path / "notes.md").read_text() == f"42 paid from savings [{op.idempotency_key}]\n"
    assert op.run.status == "completed"


def test_the_async_example(run_example, reviewer):
    with ExitStack() as reviewers:
        for to in ("ana@example.com", "cy@example.com"):
            reviewers.enter_context(deciding(reviewer, f"june-{to}"))
        reviewers.enter_context(
            deciding(reviewer, "june-bo@example.com", Decision.Kind.REJECT, comment="Bo left us")
        )
        shown = run_example("async")
    assert shown.splitlines() == [
        "ana@example.com {'sent to': 'ana@example.com'}",
        "bo@example.com not sent: Bo left us",
        "cy@example.com {'sent to': 'cy@example.com'}",
    ]
    assert Operation.objects.filter(status="committed").count() == 2


def test_the_langgraph_example(run_example, reviewer):
    with answering(reviewer, "choose", data="INV-7"), deciding(reviewer, "pay-1"):
        shown = run_example("langgraph")
    assert shown == 'Outcome: {"paid": "INV-7", "amount": 120}\n'
    op = Operation.objects.get(call_id="pay-1")
    assert (op.status, op.run.external_id, op.summary) == (
        "committed",
        "invoices-1",
        "Pay a supplier invoice.",
    )
    assert op.arguments == {"invoice": "INV-7", "amount": 120}


def test_the_openai_agents_example(run_example, reviewer):
    with deciding(reviewer, "pay-1"):
        shown = run_example("openai_agents")
    assert shown == "Paid.\n"
    op = Operation.objects.get(call_id="pay-1")
    assert (op.status, op.arguments) == ("committed", {"invoice": "INV-7", "amount": 45})
    assert op.run.status == "completed"


def test_the_agent_framework_example(run_example, reviewer):
    with deciding(reviewer, "pay-1"):
        shown = run_example("agent_framework")
    assert shown == '{"paid": "INV-7", "amount": 45}\n'
    op = Operation.objects.get(call_id="pay-1")
    assert (op.status, op.arguments) == ("committed", {"invoice": "INV-7", "amount": 45})
    assert op.run.status == "completed"


@pytest.mark.claude_cli
def test_the_claude_agent_example(run_example, reviewer, tmp_path):
    model = ScriptedModel("mcp__books__pay", {"invoice": "INV-7", "amount": 45})
    with FakeAnthropic(model) as api, deciding(reviewer, "toolu_01"):
        shown = run_example("claude_agent", **cli_env(api, str(tmp_path)))
    assert shown == "Read: Paid INV-7.\n"
    op = Operation.objects.get(call_id="toolu_01")
    assert (op.status, op.arguments) == ("committed", {"invoice": "INV-7", "amount": 45})
    assert op.run.status == "completed"
