"""The feed across processes: its cursor survives a server's restart, and writers in
several processes number a token's events 1, 2, 3… with no gap, committing them in
that order, without deadlocking (on PostgreSQL the token's counter row is locked by
each writer after its run)."""

import json
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from django.db import connections, transaction

from runs.models import AgentToken, FeedEvent, Run
from runs.services.runs import open_session, start_run
from runs.transitions import lock_run, record_run_event
from tests.api_helpers import Api
from tests.conftest import AGENT
from tests.helpers import decide_on
from tests.processes import ROOT, child_env
from tests.test_api_replay import runserver, start_server  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def read_feed(base: str, token: str, after: int = 0) -> dict:
    request = urllib.request.Request(
        f"{base}/events?after={after}&limit=500", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_the_cursor_means_the_same_after_the_server_restarts(
    agent_token,
    run,
    reviewer,
    propose,
    start_server,  # noqa: F811
):
    op = propose("pay")
    server, base = start_server(runserver)
    before = read_feed(base, agent_token.plain)
    server.kill()
    server.wait(timeout=10)
    decide_on(op, reviewer)  # Written while no server runs.

    _, base = start_server(runserver)
    again = read_feed(base, agent_token.plain)
    assert again["events"][: len(before["events"])] == before["events"]
    after = read_feed(base, agent_token.plain, before["cursor"])
    assert [e["seq"] for e in after["events"]] == [before["cursor"] + 1, before["cursor"] + 2]
    assert (after["events"][0]["operation"], after["events"][0]["to_status"]) == (op.pk, "approved")
    assert again["events"][len(before["events"]) :] == after["events"]


def writer(count: int, *run_ids: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.feed_writer", str(count), *map(str, run_ids)],
        cwd=ROOT,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_writers_in_two_processes_number_the_feed_without_gaps_in_commit_order(
    project, owner, agent_token
):
    session = open_session(project=project, owner=owner, agent="a", token=agent_token)
    a, b = (start_run(session=session, goal=goal, actor=AGENT) for goal in ("a", "b"))
    count = 40
    writers = [writer(count, a.pk, b.pk), writer(count, b.pk, a.pk)]
    seen = []
    while any(w.poll() is None for w in writers):
        seqs = list(FeedEvent.objects.filter(token=agent_token).values_list("seq", flat=True))
        assert seqs == list(range(1, len(seqs) + 1)), "a reader saw a later seq before an earlier"
        seen.append(len(seqs))
    for w in writers:
        assert (w.wait(timeout=60), w.stdout.read()) == (0, "DONE\n"), w.stderr.read()
    total = 4 + 2 * 2 * count  # Two runs started (two checkpoints each), then the writers'.
    events = FeedEvent.objects.filter(token=agent_token).select_related("checkpoint")
    assert [e.seq for e in events] == list(range(1, total + 1))
    for run in (a, b):
        in_feed = [e.checkpoint.seq for e in events if e.checkpoint.run_id == run.pk]
        assert in_feed == list(range(1, 2 + 2 * count + 1))
    assert len(set(seen)) > 2  # The reader read while the writers wrote.


def test_a_request_with_an_idempotency_key_and_a_checkpoint_writer_do_not_deadlock(
    agent_token, run
):
    """The request's transaction (its Idempotency-Key's) notes the token's last use, and
    a writer holding the run's lock numbers its checkpoint on the token's counter: the
    token's row must not be locked by the request before the run's."""
    AgentToken.objects.filter(pk=agent_token.pk).update(last_used_at=None)
    errors = []

    def write_while_holding_the_run() -> None:
        try:
            with transaction.atomic():
                lock_run(run.pk)
                time.sleep(1)  # The request comes in meanwhile.
                record_run_event(run=Run.objects.get(pk=run.pk), actor=AGENT, event="run.note")
        except Exception as error:
            errors.append(error)
        finally:
            connections.close_all()

    writer = threading.Thread(target=write_while_holding_the_run)
    writer.start()
    time.sleep(0.3)
    answer = Api(agent_token.plain).post(
        f"/runs/{run.pk}/messages", {"payload": {"text": "hi"}}, key="k"
    )
    writer.join()
    assert (answer.status_code, errors) == (201, [])
    assert AgentToken.objects.get(pk=agent_token.pk).last_used_at is not None
