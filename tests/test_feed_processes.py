"""The feed across processes: its cursor survives a server's restart; events written
by several processes are numbered 1, 2, 3… with no gap, in the order a reader sees
them committed; and a writer paused inside its transaction holds up no other run of
its token."""

import json
import subprocess
import sys
import threading
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
from tests.overlap import (
    DEADLINE_SECONDS,
    Timeline,
    assert_overlapped,
    attempt,
    hold_until_waited_on,
)
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
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_writers_in_two_processes_and_a_reader_number_the_feed_without_gaps_in_order(
    project, owner, agent_token
):
    """Two processes write checkpoints on two runs of one token while a reader numbers
    what has committed: the numbers have no gap, a reader never sees one below a number
    it saw before, and each run's checkpoints are numbered in their own order. Both
    writers have written their first round, and the reader read it, before either goes
    on: the rest they write at the same time."""
    session = open_session(project=project, owner=owner, agent="a", token=agent_token)
    a, b = (start_run(session=session, goal=goal, actor=AGENT) for goal in ("a", "b"))
    count = 40
    writers = [writer(count, a.pk, b.pk), writer(count, b.pk, a.pk)]
    for w in writers:
        assert w.stdout.readline() == "WROTE\n", w.stderr.read()
    seen = [read_numbered(agent_token)]
    for w in writers:
        w.stdin.write("go on\n")
        w.stdin.flush()
    while any(w.poll() is None for w in writers):
        seen.append(read_numbered(agent_token))
    for w in writers:
        assert (w.wait(timeout=60), w.stdout.read()) == (0, "DONE\n"), w.stderr.read()
    number_feed(agent_token.pk)
    total = 4 + 2 * 2 * count  # Two runs started (two checkpoints each), then the writers'.
    events = FeedEvent.objects.filter(token=agent_token).select_related("checkpoint")
    assert [e.seq for e in events] == list(range(1, total + 1))
    for run in (a, b):
        in_feed = [e.checkpoint.seq for e in events if e.checkpoint.run_id == run.pk]
        assert in_feed == list(range(1, 2 + 2 * count + 1))
    assert seen[0] == 4 + 2 * 2  # The reader read while both writers were under way,
    assert seen == sorted(seen)  # and never saw fewer than before.
    by_writer = [
        [e.seq for e in events if e.checkpoint.actor_label == f"writer {w.pid}"] for w in writers
    ]
    assert max(seqs[0] for seqs in by_writer) < min(seqs[-1] for seqs in by_writer)


def read_numbered(agent_token) -> int:
    """Number what has committed, as a reader of the feed does; how many are numbered,
    checking they run 1, 2, 3… with no gap."""
    number_feed(agent_token.pk)
    seqs = list(
        FeedEvent.objects.filter(token=agent_token, seq__isnull=False).values_list("seq", flat=True)
    )
    assert seqs == list(range(1, len(seqs) + 1)), "a reader saw a later seq before an earlier"
    return len(seqs)


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
    timeline, release = Timeline(), threading.Event()

    def paused_writer() -> None:
        try:
            with transaction.atomic():
                record_run_event(run=lock_run(a.pk), actor=AGENT, event="run.note", reason="a")
                timeline.mark("a written")
                if release.wait(DEADLINE_SECONDS):
                    timeline.mark("a goes on when told")
        finally:
            connections.close_all()

    thread = threading.Thread(target=paused_writer)
    thread.start()
    assert timeline.wait_for("a written")
    record_run_event(run=Run.objects.get(pk=b.pk), actor=AGENT, event="run.note", reason="b")
    timeline.mark("b committed")
    number_feed(agent_token.pk)
    release.set()
    thread.join()
    number_feed(agent_token.pk)

    # b's write did not wait for a: a was still paused, until told, when b committed.
    timeline.assert_order("a written", "b committed", "a goes on when told")
    after = FeedEvent.objects.filter(token=agent_token, seq__gt=cursor).select_related("checkpoint")
    assert [(e.seq, e.checkpoint.reason) for e in after] == [(cursor + 1, "b"), (cursor + 2, "a")]


def test_a_request_with_an_idempotency_key_and_a_checkpoint_writer_do_not_deadlock(
    agent_token, run
):
    """The request's transaction (its Idempotency-Key's) notes the token's last use
    while a writer holds the run's lock: neither may wait for the other. The writer goes
    on only once the request waits for its lock."""
    AgentToken.objects.filter(pk=agent_token.pk).update(last_used_at=None)
    timeline, errors = Timeline(), []

    def write_while_holding_the_run() -> None:
        try:
            with transaction.atomic():
                lock_run(run.pk)
                timeline.mark("writer holds")
                hold_until_waited_on(timeline, "request", holder="writer")
                record_run_event(run=Run.objects.get(pk=run.pk), actor=AGENT, event="run.note")
        except Exception as error:
            errors.append(error)
        finally:
            connections.close_all()

    writer = threading.Thread(target=write_while_holding_the_run)
    writer.start()
    assert timeline.wait_for("writer holds")
    with attempt(timeline, "request"):
        answer = Api(agent_token.plain).post(
            f"/runs/{run.pk}/messages", {"payload": {"text": "hi"}}, key="k"
        )
    writer.join()
    assert (answer.status_code, errors) == (201, [])
    assert_overlapped(timeline, "request", holder="writer")
    assert AgentToken.objects.get(pk=agent_token.pk).last_used_at is not None
