"""Two real connections (threads) write at the same time; the database decides."""

import threading

import pytest
from django.db import connection
from django.db.models.signals import pre_save

from runs.actors import Actor
from runs.errors import StaleVersion
from runs.models import Checkpoint, Message, Run
from runs.payloads import MessageKind
from runs.services.runs import append_message
from runs.transitions import transition_run
from tests.overlap import Timeline, assert_overlapped, attempt, hold_until_waited_on

pytestmark = pytest.mark.django_db(transaction=True)


def in_thread(target, *args, name: str | None = None) -> threading.Thread:
    def body() -> None:
        try:
            target(*args)
        finally:
            connection.close()

    thread = threading.Thread(target=body, name=name)
    thread.start()
    return thread


def test_two_writers_on_the_same_version_one_wins_one_is_stale(run):
    """Writer A holds its transaction open inside the write; writer B, starting from the
    same version, waits for A (row lock / SQLite write lock) and is then refused. A lets
    go only once B waits: had B started after A committed, its refusal would prove
    nothing."""
    timeline, outcomes = Timeline(), {}
    version = run.version

    def hold_inside(**_kwargs) -> None:
        if threading.current_thread().name == "A":
            timeline.mark("A holds")
            hold_until_waited_on(timeline, "B", holder="A")

    def write(name: str, target: str, extra: dict) -> None:
        stale_copy = Run.objects.get(pk=run.pk)
        try:
            with attempt(timeline, name):
                transition_run(
                    run=stale_copy,
                    to=target,
                    actor=Actor.agent(name),
                    expected_version=version,
                    **extra,
                )
            outcomes[name] = "won"
        except StaleVersion as exc:
            outcomes[name] = str(exc)

    pre_save.connect(hold_inside, sender=Checkpoint)
    try:
        extra = {"reason": "approval", "unblock": "a decision"}
        a = in_thread(write, "A", "waiting", extra, name="A")
        assert timeline.wait_for("A holds")
        b = in_thread(write, "B", "completed", {}, name="B")
        a.join(timeout=90)
        b.join(timeout=90)
    finally:
        pre_save.disconnect(hold_inside, sender=Checkpoint)

    assert_overlapped(timeline, "B", holder="A")
    assert outcomes["A"] == "won"
    assert f"is at version {version + 1}, not {version}" in outcomes["B"]
    run.refresh_from_db()
    assert (run.status, run.version) == ("waiting", version + 1)
    assert run.checkpoints.count() == version + 1


def test_concurrent_messages_get_distinct_consecutive_seqs(run):
    """Three writers append each of their messages at the same moment (a barrier before
    each): every round's three appends race for the next seqs."""
    rounds, writers = 10, ("one", "two", "three")
    together = threading.Barrier(len(writers), timeout=60)

    def write_many(author: str) -> None:
        for n in range(rounds):
            together.wait()
            append_message(
                run=run,
                kind=MessageKind.AGENT,
                payload={"text": f"{author} {n}"},
                actor=Actor.agent(author),
            )

    threads = [in_thread(write_many, name) for name in writers]
    for thread in threads:
        thread.join(timeout=120)

    messages = list(Message.objects.filter(run=run).order_by("seq"))
    assert [m.seq for m in messages] == list(range(1, rounds * len(writers) + 1))
    # Round n's appends were in flight together and took seqs 3n+1..3n+3 between them.
    by_round = [
        sorted(m.payload["text"] for m in messages[n * 3 : n * 3 + 3]) for n in range(rounds)
    ]
    assert by_round == [sorted(f"{a} {n}" for a in writers) for n in range(rounds)]
