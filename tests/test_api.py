"""Across the agent API: two processes proposing the same call at once. (The
Idempotency-Key's replays are in ``test_api_replay.py``.)"""

import json
import subprocess
import sys

import pytest

from runs.models import Operation
from tests.api_helpers import agent_proposal
from tests.processes import ROOT, child_env

pytest_plugins = ["tests.api_helpers"]


# --- two processes, one call -----------------------------------------------------------------

CHILD = """
import json, sys
import django
django.setup()
from django.test import Client
from django.test.utils import setup_test_environment
setup_test_environment()
path, token = sys.argv[1], sys.argv[2]
client = Client()
print("READY", flush=True)
body = sys.stdin.readline()
response = client.post(
    path, body, content_type="application/json", headers={"Authorization": "Bearer " + token}
)
print(json.dumps({"status": response.status_code, "body": response.json()}), flush=True)
"""


def start_child(path: str, token: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, path, token],
        cwd=ROOT,
        env=child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("attempt", range(3))
def test_two_processes_proposing_the_same_call_make_one_operation(api, agent_token, run, attempt):
    body = {**agent_proposal("call-race"), "base_version": api.run_version(run.pk)}
    children = [start_child(f"/api/v1/runs/{run.pk}/operations", agent_token.plain) for _ in "ab"]
    for child in children:
        line = child.stdout.readline().strip()
        assert line == "READY", child.stderr.read()
    for child in children:  # Both are set up; let them go at once.
        child.stdin.write(json.dumps(body) + "\n")
        child.stdin.flush()
    answers = []
    for child in children:
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
        answers.append(json.loads(out.strip().splitlines()[-1]))

    assert {a["status"] for a in answers} <= {200, 201}
    assert 201 in {a["status"] for a in answers}
    operations = Operation.objects.filter(run=run, call_id="call-race")
    assert operations.count() == 1
    assert {a["body"]["id"] for a in answers} == {operations.get().pk}
    assert operations.get().checkpoints.filter(event="operation.proposed").count() == 1
