"""Two real connections (threads) write at the same time; the database decides."""

import threading
import time

import pytest
from django.db import connection
from django.db.models.signals import pre_save

from runs.actors import Actor
from runs.errors import StaleVersion
from runs.models import Checkpoint, Message, Run
from runs.payloads import MessageKind
from runs.services.runs import append_message
from runs.transitions import transition_run

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
    same version, must wait for A (row lock / SQLite write lock) and then be refused."""
    a_inside, outcomes = threading.Event(), {}
    version = run.version

    def hold_inside(**_kwargs) -> None:
        if threading.current_thread().name == "A":
            a_inside.set()
            time.sleep(0.5)  # B starts now and must block on A's lock.

    def write(name: str, target: str, extra: dict) -> None:
        stale_copy = Run.objects.get(pk=run.pk)
        try:
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
        assert a_inside.wait(timeout=10)
        b = in_thread(write, "B", "completed", {}, name="B")
        a.join(timeout=30)
        b.join(timeout=30)
    finally:
        pre_save.disconnect(hold_inside, sender=Checkpoint)

    assert outcomes["A"] == "won"
    assert f"is at version {version + 1}, not {version}" in outcomes["B"]
    run.refresh_from_db()
    assert (run.status, run.version) == ("waiting", version + 1)
    assert run.checkpoints.count() == version + 1


def test_concurrent_messages_get_distinct_consecutive_seqs(run):
    def write_many(author: str) -> None:
        for n in range(10):
            append_message(
                run=run,
                kind=MessageKind.AGENT,
                payload={"text": f"{author} {n}"},
                actor=Actor.agent(author),
            )

    threads = [in_thread(write_many, name) for name in ("one", "two", "three")]
    for thread in threads:
        thread.join(timeout=60)

    assert list(Message.objects.filter(run=run).values_list("seq", flat=True)) == list(range(1, 31))
