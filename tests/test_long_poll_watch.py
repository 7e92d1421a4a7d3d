"""While long-polls wait, one thread per server process watches what they wait on
(``runs.api.watcher``): a change answers the waits on it, and only those, and a
waiting agent holds no database connection. Real concurrent requests against the live
server."""

import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import InterfaceError, connection

from runs.api import watcher
from runs.api.watcher import WATCHER
from runs.models import Operation
from tests.api_helpers import PREFIX
from tests.helpers import decide_on
from tests.test_api_waits import get, pending

pytest_plugins = ["tests.api_helpers"]
WAIT = 4


def poll(live_server, token: str, path: str, wait: int = WAIT):
    url = f"{live_server.url}{PREFIX}{path}?wait={wait}"
    return get(url, {"Authorization": f"Bearer {token}"})


@pytest.mark.django_db(transaction=True)
def test_a_decision_answers_the_waits_on_its_operation_and_only_those(
    live_server, agent_token, reviewer
):
    decided, untouched = pending(agent_token.plain), pending(agent_token.plain)
    polls = [decided, decided, untouched]
    with ThreadPoolExecutor(len(polls)) as pool:
        answers = [pool.submit(poll, live_server, agent_token.plain, path) for path in polls]
        time.sleep(1)
        decide_on(Operation.objects.get(pk=decided.rsplit("/", 1)[1]), reviewer)
        connection.close()  # This thread's: the live server's threads may not share it.
        decided_at = time.monotonic()
        answered = [(future.result(), time.monotonic()) for future in answers]

    for (status, _, body, seconds), at in answered[:2]:
        assert (status, json.loads(body)["status"]) == (200, "approved")
        assert seconds >= 0.9 and at - decided_at < 1
    status, _, body, seconds = answered[2][0]
    assert (status, json.loads(body)["status"]) == (200, "proposed")
    assert seconds >= WAIT


@pytest.mark.django_db(transaction=True)
def test_waiting_agents_hold_no_database_connection(live_server, agent_token):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has no connections to run out of")
    paths = [pending(agent_token.plain) for _ in range(6)]
    connection.close()
    counts = []

    def count_while_they_wait() -> None:
        time.sleep(WAIT / 2)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            )
            counts.append(cursor.fetchone()[0])
        connection.close()

    counter = threading.Thread(target=count_while_they_wait)
    counter.start()
    with ThreadPoolExecutor(len(paths)) as pool:
        answers = list(pool.map(lambda path: poll(live_server, agent_token.plain, path), paths))
    counter.join()

    assert [status for status, *_ in answers] == [200] * len(paths)
    assert counts == [1], "six waits should share the one connection of the watching thread"


@pytest.mark.django_db(transaction=True)
def test_a_failed_read_is_tried_again_and_the_wait_still_wakes(propose, reviewer, monkeypatch):
    """The watching thread outlives a failed read (the database restarting, a dropped
    connection): otherwise every later wait of the process would sleep out its time."""
    operation = propose("call-1")
    failures, read = [], watcher._wake

    def fails_once(waits) -> None:
        if not failures:
            failures.append(InterfaceError("connection already closed"))
            raise failures[0]
        read(waits)

    monkeypatch.setattr(watcher, "_wake", fails_once)
    seen = []

    def wait() -> None:
        seen.append(asyncio.run(WATCHER.wait("operation", operation.pk, operation.version, 10)))
        connection.close()

    waiting = threading.Thread(target=wait)
    waiting.start()
    time.sleep(0.2)
    decide_on(operation, reviewer)
    waiting.join(timeout=15)

    assert len(failures) == 1
    assert seen == [operation.version], "the wait slept out its time"
