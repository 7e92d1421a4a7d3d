"""The feed across processes: its cursor survives a server's restart; events written
by several processes are numbered 1, 2, 3… with no gap, in the order a reader sees
them committed; and a writer paused inside its transaction holds up no other run of
its token."""

import json
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from django.db import connection, connections, transaction

from runs.api.feed import number_feed
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


def test_writers_in_two_processes_and_a_reader_number_the_feed_without_gaps_in_order(
    project, owner, agent_token
):
    """Two processes write checkpoints on two runs of one token while a reader numbers
    what has committed: the numbers have no gap, a reader never sees one below a number
    it saw before, and each run's checkpoints are numbered in their own order."""
    session = open_session(project=project, owner=owner, agent="a", token=agent_token)
    a, b = (start_run(session=session, goal=goal, actor=AGENT) for goal in ("a", "b"))
    count = 40
    writers = [writer(count, a.pk, b.pk), writer(count, b.pk, a.pk)]
    seen = []
    while any(w.poll() is None for w in writers):
        number_feed(agent_token.pk)
        seqs = list(
            FeedEvent.objects.filter(token=agent_token, seq__isnull=False).values_list(
                "seq", flat=True
            )
        )
        assert seqs == list(range(1, len(seqs) + 1)), "a reader saw a later seq before an earlier"
        seen.append(len(seqs))
    for w in writers:
        assert (w.wait(timeout=60), w.stdout.read()) == (0, "DONE\n"), w.stderr.read()
    number_feed(agent_token.pk)
    total = 4 + 2 * 2 * count  # Two runs started (two checkpoints each), then the writers'.
    events = FeedEvent.objects.filter(token=agent_token).select_related("checkpoint")
    assert [e.seq for e in events] == list(range(1, total + 1))
    for run in (a, b):
        in_feed = [e.checkpoint.seq for e in events if e.checkpoint.run_id == run.pk]
        assert in_feed == list(range(1, 2 + 2 * count + 1))
    assert len(set(seen)) > 2  # The reader read while the writers wrote.


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite writes one transaction at a time"
)
def test_a_writer_paused_in_one_run_holds_up_no_other_run_of_its_token(project, owner, agent_token):
    """A writer stopped inside its transaction on run a (a worker paused in the claim
    that carries out a transfer) holds a's lock: a write to run b of the same agent
    commits at once, a reader numbers it, and a's entry is numbered after it once a
    commits, so a cursor taken meanwhile misses nothing."""
    session = open_session(project=project, owner=owner, agent="a", token=agent_token)
    a, b = (start_run(session=session, goal=goal, actor=AGENT) for goal in ("a", "b"))
    number_feed(agent_token.pk)
    cursor = AgentToken.objects.get(pk=agent_token.pk).feed_seq
    written, release = threading.Event(), threading.Event()

    def paused_writer() -> None:
        try:
            with transaction.atomic():
                record_run_event(run=lock_run(a.pk), actor=AGENT, event="run.note", reason="a")
                written.set()
                release.wait(30)
        finally:
            connections.close_all()

    thread = threading.Thread(target=paused_writer)
    thread.start()
    assert written.wait(10)
    started = time.monotonic()
    record_run_event(run=Run.objects.get(pk=b.pk), actor=AGENT, event="run.note", reason="b")
    assert time.monotonic() - started < 2
    number_feed(agent_token.pk)
    release.set()
    thread.join()
    number_feed(agent_token.pk)

    after = FeedEvent.objects.filter(token=agent_token, seq__gt=cursor).select_related("checkpoint")
    assert [(e.seq, e.checkpoint.reason) for e in after] == [(cursor + 1, "b"), (cursor + 2, "a")]


def test_a_request_with_an_idempotency_key_and_a_checkpoint_writer_do_not_deadlock(
    agent_token, run
):
    """The request's transaction (its Idempotency-Key's) notes the token's last use
    while a writer holds the run's lock: neither may wait for the other."""
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
