"""The production server while PostgreSQL drops its connections or cannot be reached
(#31): the pool lends no connection PostgreSQL dropped, a request waits for one at most
OVERSIGHT_WEB_DB_WAIT_SECONDS, and what the database could not serve is a 503 with
Retry-After (JSON to an agent, a plain page to a person), never an HTML 500. A write cut
short that way was rolled back, so the client sends it again under its key, and it is
made once. Whatever else fails, an agent is answered in JSON."""

import http.client
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest
from django.db import connection
from django.test import Client

from oversight_client import Oversight
from runs.api.api import RETRY_AFTER_SECONDS
from runs.models import AgentToken, Operation, Run, Session
from tests.api_helpers import Api, proposal
from tests.processes import ROOT, Output, child_env, listening_port, wait_until
from tests.test_production_server import Browser, healthz, stop

pytestmark = pytest.mark.timeout(180)
POSTGRESQL = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite has no server to drop a connection"
)
THREADS = 4
# The database's own words, which must never reach an agent or a person.
DATABASE_WORDS = ("terminat", "FATAL", "connection", "psycopg", "Traceback")


@pytest.fixture(scope="module")
def server(django_db_setup, tmp_path_factory) -> Iterator[int]:
    """``serve`` on the test database (one process of four threads, PostgreSQL through
    its pool), on the port the system gave it: its port."""
    web = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--bind", "127.0.0.1:0",
         "--processes", "1", "--threads", str(THREADS)],
        cwd=ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    said = Output(web.stdout)
    try:
        port = listening_port(said, web)
        healthz(Browser(port), {200, 503}, web)  # Answering.
        yield port
    finally:
        assert stop(web) == 0, said.text()[-3000:]


def api(port: int, token: str, method: str, path: str, body=None, key: str = ""):
    """An agent's request: the response, and its body decoded (its text if not JSON)."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if key:
        headers["Idempotency-Key"] = key
    client = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    client.request(method, f"/api/v1{path}", json.dumps(body) if body else None, headers)
    response = client.getresponse()
    text = response.read().decode()
    client.close()
    try:
        return response, json.loads(text)
    except ValueError:
        return response, text


def the_databases_connections(where: str = "") -> str:
    return (
        "FROM pg_stat_activity WHERE datname = current_database() "
        f"AND pid <> pg_backend_pid() AND backend_type = 'client backend' {where}"
    )


def counted(where: str = "") -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) {the_databases_connections(where)}")
        return cursor.fetchone()[0]


def terminate(where: str = "") -> int:
    """Terminate the server's connections, as a restart of PostgreSQL or an
    administrator would: how many."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count(pg_terminate_backend(pid)) {the_databases_connections(where)}"
        )
        return cursor.fetchone()[0]


@contextmanager
def locked(sql: str) -> Iterator[None]:
    """Rows or a table locked (``sql``, a ``LOCK`` or ``SELECT … FOR UPDATE``) by a
    transaction of a second connection until the block ends: the server's requests
    that need them wait meanwhile, each holding a connection of its pool."""
    holder = connection.copy()
    try:
        holder.set_autocommit(False)
        with holder.cursor() as cursor:
            cursor.execute(sql)
        yield
    finally:
        holder.rollback()
        holder.close()


@contextmanager
def unreachable() -> Iterator[None]:
    """PostgreSQL refusing the server, as while it restarts: the test database takes no
    new connection (this test's own stays open) and the server's are dropped."""
    database = connection.ops.quote_name(connection.settings_dict["NAME"])
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER DATABASE {database} CONNECTION LIMIT 0")
    try:
        terminate()
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER DATABASE {database} CONNECTION LIMIT -1")


def unavailable(response, body) -> bool:
    """The API's 503: JSON with Retry-After, and none of the database's words."""
    return (
        response.status == 503
        and response.getheader("Retry-After") == str(RETRY_AFTER_SECONDS)
        and response.getheader("Content-Type").startswith("application/json")
        and body["error"] == "unavailable"
        and not any(word in json.dumps(body) for word in DATABASE_WORDS)
    )


@POSTGRESQL
def test_connections_postgresql_dropped_are_not_lent_to_the_next_requests(
    server, transactional_db, run, agent_token
):
    """PostgreSQL drops every connection of the pool at once: the next requests are
    answered at once, neither failed with a dropped connection nor kept waiting while
    the pool tries its dropped connections one after another (seven seconds for four)."""
    path = f"/runs/{run.pk}"
    with ThreadPoolExecutor(THREADS) as agents, locked(f"LOCK TABLE {AgentToken._meta.db_table}"):
        # Requests at once, each holding a connection while it waits for the table.
        reads = [agents.submit(api, server, agent_token.plain, "GET", path) for _ in range(THREADS)]
        wait_until(lambda: counted("AND wait_event_type = 'Lock'") == THREADS, 60, "every wait")
    assert [read.result()[0].status for read in reads] == [200] * THREADS
    assert terminate() == THREADS  # The pool kept them all, idle.

    started = time.monotonic()
    statuses = [api(server, agent_token.plain, "GET", path)[0].status for _ in range(THREADS)]

    assert statuses == [200] * THREADS
    # A pool trying its dropped connections one after another waits 1 + 2 + 4 seconds.
    assert time.monotonic() - started < 5


@POSTGRESQL
def test_while_postgresql_is_out_of_reach_agents_get_json_503s_and_people_a_503_page(
    server, transactional_db, run, agent_token
):
    token, path = agent_token.plain, f"/runs/{run.pk}"
    with unreachable():
        started = time.monotonic()
        read = api(server, token, "GET", path)
        waited = time.monotonic() - started
        # A write under an Idempotency-Key is first met by its middleware, outside the
        # API's own error handlers.
        keyed = api(server, token, "POST", "/sessions", {"title": "Lost"}, key="lost-1")
        unkeyed = api(server, token, "POST", "/sessions", {"title": "Lost"})
        page = http.client.HTTPConnection("127.0.0.1", server, timeout=30)
        page.request("GET", "/approvals/", headers={"Cookie": "sessionid=a-signed-in-person"})
        shown = page.getresponse()
        html = shown.read().decode()
        page.close()

    assert waited < 5  # The pool's wait (2 s), not a 10-second one.
    for answer in (read, keyed, unkeyed):
        assert unavailable(*answer), answer[1]
    assert (shown.status, shown.getheader("Retry-After")) == (503, str(RETRY_AFTER_SECONDS))
    assert "Oversight is unavailable" in html
    assert not any(word in html for word in DATABASE_WORDS)
    assert Session.objects.filter(title="Lost").count() == 0
    # PostgreSQL back after these eight seconds: the pool connects again at once, not at
    # its next attempt of ever fewer (five seconds later, and more after a longer outage).
    restored = time.monotonic()
    wait_until(lambda: api(server, token, "GET", path)[0].status == 200, 60, "an answer")
    assert time.monotonic() - restored < 3


def proposing(port: int, token: str, run, key: str):
    body = proposal(base_version=run.version)
    return api(port, token, "POST", f"/runs/{run.pk}/operations", body, key)


@contextmanager
def terminated_midway(run_id: int) -> Iterator[None]:
    """The block's proposal on ``run_id`` has its connection terminated while it waits
    for the run's row (locked meanwhile), inside its transaction."""
    with locked(f"SELECT id FROM {Run._meta.db_table} WHERE id = {run_id} FOR UPDATE"):
        yield
        wait_until(lambda: counted("AND wait_event_type = 'Lock'") == 1, 60, "the proposal's wait")
        assert terminate("AND wait_event_type = 'Lock'") == 1


@POSTGRESQL
def test_a_proposal_cut_short_by_a_dropped_connection_is_kept_once_when_sent_again(
    server, transactional_db, run, agent_token
):
    """The first attempt's transaction rolled back with its connection, key and all: the
    same request sent again runs for real, and a third gets the stored answer."""
    token = agent_token.plain
    with ThreadPoolExecutor(1) as agent, terminated_midway(run.pk):
        first = agent.submit(proposing, server, token, run, "propose-1")
    assert unavailable(*first.result()), first.result()[1]
    assert Operation.objects.count() == 0

    again, made = proposing(server, token, run, "propose-1")
    replayed, same = proposing(server, token, run, "propose-1")

    assert (again.status, replayed.status) == (201, 201)
    assert replayed.getheader("Idempotent-Replayed") == "true"
    assert same == made
    assert list(Operation.objects.values_list("pk", flat=True)) == [made["id"]]


@POSTGRESQL
def test_the_client_proposes_once_through_a_dropped_connection(
    server, transactional_db, run, agent_token
):
    """The client is answered 503, waits out its Retry-After, and sends the proposal
    again under its key: one operation."""
    ovs = Oversight(f"http://127.0.0.1:{server}", agent_token.plain, timeout=10, backoff=0.01)
    body = proposal()
    with ThreadPoolExecutor(1) as agent, terminated_midway(run.pk):
        proposed = agent.submit(
            ovs.propose, run.pk, body["call_id"], body["action"], body["arguments"],
            rollback_kind=body["rollback_kind"], base_version=run.version,
        )  # fmt: skip
    assert list(Operation.objects.values_list("pk", flat=True)) == [proposed.result()["id"]]


def test_an_api_request_that_fails_otherwise_is_answered_in_json_all_the_same(
    monkeypatch, run, agent_token
):
    """Not the database, but a bug (here the token's lookup raising): a 500, in the
    API's JSON, with none of the exception's words; whether the API's handlers or a
    middleware (a write under an Idempotency-Key) met it."""

    def broken(plain: str):
        raise RuntimeError("a bug at /srv/oversight/runs/models/tokens.py")

    monkeypatch.setattr(AgentToken, "named", broken)
    agent = Api(agent_token.plain, Client(raise_request_exception=False))
    for failed in (agent.get(f"/runs/{run.pk}"), agent.post("/sessions", {}, key="k-1")):
        assert (failed.status_code, failed["Content-Type"]) == (
            500,
            "application/json; charset=utf-8",
        )
        assert failed.json()["error"] == "server_error"
        assert "/srv/oversight" not in failed.content.decode()
