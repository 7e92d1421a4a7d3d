"""While long-polls wait, one thread per server process watches what they wait on
(``runs.api.watcher``): a change answers the waits on it, and only those, and a
waiting agent holds no database connection. Real concurrent requests against the live
server."""

import asyncio
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import InterfaceError, connection

from runs.api import watcher
from runs.api.watcher import WATCHER
from runs.models import Operation
from tests.api_helpers import PREFIX
from tests.helpers import decide_on
from tests.processes import wait_until
from tests.test_api_waits import get, pending, until_long_polls_wait

pytest_plugins = ["tests.api_helpers"]
WAIT = 4
LONG = 30  # A wait that only a change ends before the test's deadline.


def poll(live_server, token: str, path: str, wait: int = WAIT):
    url = f"{live_server.url}{PREFIX}{path}?wait={wait}"
    return get(url, {"Authorization": f"Bearer {token}"})


@pytest.mark.django_db(transaction=True)
def test_a_decision_answers_the_waits_on_its_operation_and_only_those(
    live_server, agent_token, reviewer
):
    """The decided operation's two waits would last LONG: they end with the decision,
    while the untouched one's lasts its whole WAIT."""
    decided, untouched = pending(agent_token.plain), pending(agent_token.plain)
    polls = [(decided, LONG), (decided, LONG), (untouched, WAIT)]
    with ThreadPoolExecutor(len(polls)) as pool:
        answers = [pool.submit(poll, live_server, agent_token.plain, *p) for p in polls]
        until_long_polls_wait(len(polls))
        decide_on(Operation.objects.get(pk=decided.rsplit("/", 1)[1]), reviewer)
        connection.close()  # This thread's: the live server's threads may not share it.
        answered = [future.result() for future in answers]

    for status, _, body, seconds in answered[:2]:
        assert (status, json.loads(body)["status"]) == (200, "approved")
        assert seconds < LONG, "the decision did not end the wait"
    status, _, body, seconds = answered[2]
    assert (status, json.loads(body)["status"]) == (200, "proposed")
    assert seconds >= WAIT


@pytest.mark.django_db(transaction=True)
def test_waiting_agents_hold_no_database_connection(live_server, agent_token, reviewer):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has no connections to run out of")
    paths = [pending(agent_token.plain) for _ in range(6)]

    def wait(path: str):
        return poll(live_server, agent_token.plain, path, LONG)

    with ThreadPoolExecutor(len(paths)) as pool:
        answers = pool.map(wait, paths)
        until_long_polls_wait(len(paths))
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            )
            (count,) = cursor.fetchone()
        for path in paths:  # What they wait for, at once.
            decide_on(Operation.objects.get(pk=path.rsplit("/", 1)[1]), reviewer)
        connection.close()
        answers = list(answers)

    assert [status for status, *_ in answers] == [200] * len(paths)
    assert count == 1, "six waits should share the one connection of the watching thread"


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
        seen.append(
            asyncio.run(WATCHER.wait(10, ("operation", operation.pk, operation.version)))[0]
        )
        connection.close()

    waiter = threading.Thread(target=wait)
    waiter.start()
    wait_until(lambda: failures, message="the watching thread's failed read")
    decide_on(operation, reviewer)
    waiter.join(timeout=60)

    assert len(failures) == 1
    assert seen == [operation.version], "the wait slept out its time"
