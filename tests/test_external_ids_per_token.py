"""External ids are each token's own (#35): two agents of one project may each name a
session, a run, an operation or a request "deploy-1". Each gets its own object, finds
only its own, repeats its own create safely, and never learns from a 409 that the other
has used the name. The database holds the rule: writers racing with one name end with
one row per token, and the migration that brings it in keeps every name and every
writer going."""

import json
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.recorder import MigrationRecorder

from runs.errors import ExternalIdConflict
from runs.models import HumanRequest, Operation, Run, Session
from runs.services import identity
from runs.services import requests as service
from runs.services.runs import open_session, start_run
from tests.api_helpers import PREFIX, Api, agent_proposal, problem
from tests.conftest import AGENT, issued
from tests.test_migration_isolation import migrate

pytest_plugins = ["tests.api_helpers"]

NAME = "deploy-1"
BEFORE, MIGRATION = ("runs", "0028_token_issuer"), ("runs", "0029_external_id_per_token")
MODELS = {"session": Session, "run": Run, "operation": Operation, "request": HumanRequest}
KINDS = list(MODELS)


class Agent:
    """An agent of the project over the API: its token, and a session and a run of its
    own to create runs, operations and requests in."""

    def __init__(self, token) -> None:
        self.token, self.api = token, Api(token.plain)
        self.session = self.api.post("/sessions", {"title": "work"}).json()["id"]
        self.run = self.api.post("/runs", {"session": self.session, "goal": "work"}).json()["id"]

    def request_for(
        self, kind: str, what: str, external_id: str = NAME, call_id: str = "call-1"
    ) -> tuple[str, dict]:
        """The path and body creating a ``kind`` that says ``what``, named ``external_id``."""
        path, body = {
            "session": ("/sessions", {"title": what}),
            "run": ("/runs", {"session": self.session, "goal": what}),
            "operation": (
                f"/runs/{self.run}/operations",
                agent_proposal(
                    call_id, arguments={"what": what}, base_version=self.api.run_version(self.run)
                ),
            ),
            "request": (f"/runs/{self.run}/requests", {"prompt": what}),
        }[kind]
        return path, {**body, "external_id": external_id}

    def create(self, kind: str, what: str, **naming: str):
        return self.api.post(*self.request_for(kind, what, **naming))

    def find(self, kind: str) -> list[int]:
        found = self.api.get(f"/{kind}s", {"external_id": NAME})
        assert found.status_code == 200, found.content
        return [obj["id"] for obj in found.json()]


@pytest.fixture
def first(agent_token) -> Agent:
    return Agent(agent_token)


@pytest.fixture
def second(project, owner) -> Agent:
    """Another agent of the same project, acting for the same person."""
    return Agent(issued(project, "second-agent", owner))


# How each kind names the token that created it.
CREATOR = {
    "session": "token",
    "run": "session__token",
    "operation": "proposed_by_token",
    "request": "asked_by_token",
}


def named(kind: str, token) -> list[int]:
    """The pks of ``token``'s objects of ``kind`` named ``NAME``, as stored."""
    creator = {CREATOR[kind]: token}
    return list(
        MODELS[kind].objects.filter(external_id=NAME, **creator).values_list("pk", flat=True)
    )


# --- one name, two tokens ---------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_two_tokens_of_a_project_each_get_their_own_object_of_one_name(kind, first, second):
    mine = first.create(kind, "ours")
    theirs = second.create(kind, "something else entirely")

    assert (mine.status_code, theirs.status_code) == (201, 201), theirs.content
    assert mine.json()["id"] != theirs.json()["id"]
    assert first.find(kind) == [mine.json()["id"]]
    assert second.find(kind) == [theirs.json()["id"]]
    assert named(kind, first.token) == [mine.json()["id"]]
    assert named(kind, second.token) == [theirs.json()["id"]]


@pytest.mark.parametrize("kind", KINDS)
def test_each_token_still_repeats_its_own_create_and_is_refused_only_its_own(kind, first, second):
    mine = first.create(kind, "ours").json()
    theirs = second.create(kind, "theirs").json()

    again, their_again = first.create(kind, "ours"), second.create(kind, "theirs")
    assert (again.status_code, again.json()) == (200, mine)
    assert (their_again.status_code, their_again.json()) == (200, theirs)

    # What the other token's object says is, to this token, just something else.
    body = problem(first.create(kind, "theirs"), 409)
    assert body["error"] == "external_id_conflict"
    assert body["detail"] == (
        f"external_id: {NAME!r} already names your {kind} {mine['id']}, which describes "
        "something else; use a new external_id"
    )
    assert MODELS[kind].objects.filter(external_id=NAME).count() == 2


def tokenless_run(project, owner) -> Run:
    session = open_session(project=project, owner=owner, agent="in-process")
    return start_run(session=session, goal="Tidy up", actor=AGENT)


def test_objects_made_without_a_token_share_the_projects_names(project, owner, run, agent_token):
    """In-process code asks without a token: its names are the project's, as before,
    apart from any token's."""
    tokenless = tokenless_run(project, owner)
    asked, new = service.ask(run=tokenless, prompt="Ship?", actor=AGENT, external_id=NAME)
    again, new_again = service.ask(run=tokenless, prompt="Ship?", actor=AGENT, external_id=NAME)
    assert (new, new_again, again) == (True, False, asked)
    with pytest.raises(ExternalIdConflict):
        service.ask(run=tokenless, prompt="Ship now?", actor=AGENT, external_id=NAME)

    mine, new = service.ask(
        run=run, prompt="Ship now?", actor=AGENT, token=agent_token, external_id=NAME
    )
    assert new and mine != asked


# --- the database holds it --------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_the_database_refuses_a_tokens_second_object_of_one_name(kind, first, second):
    """A check in Python alone would let a racing writer through; the unique constraint
    does not. A run's name is its token's across sessions: the run keeps its session's
    token on its own row for that."""
    one = first.create(kind, "one").json()["id"]
    first.session = first.api.post("/sessions", {"title": "another"}).json()["id"]
    unnamed = first.create(kind, "two", external_id="", call_id="call-2").json()["id"]
    theirs = second.create(kind, "one").json()["id"]

    with pytest.raises(IntegrityError), transaction.atomic():
        MODELS[kind].objects.filter(pk=unnamed).update(external_id=NAME)

    assert named(kind, first.token) == [one]
    assert named(kind, second.token) == [theirs]


# --- racing writers ---------------------------------------------------------------------

WRITERS_PER_TOKEN = 2


def post_live(live_server, token, path: str, body: dict) -> tuple[int, dict]:
    """POST through the live server, as a separate agent process would: its status and
    body."""
    request = urllib.request.Request(
        f"{live_server.url}{PREFIX}{path}",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token.plain}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture
def all_looked_first(monkeypatch):
    """Every writer looks for the name before any of them writes: each request's first
    look (``identity._existing``) waits for all the others' at a barrier, so that all
    find nothing and all go on to insert. Only the database can then keep one row per
    token."""
    looked = threading.Barrier(2 * WRITERS_PER_TOKEN, timeout=60)
    look, seen = identity._existing, threading.local()

    def look_then_meet(*args):
        found = look(*args)
        if not getattr(seen, "met", False):
            seen.met = True
            looked.wait()
        return found

    monkeypatch.setattr(identity, "_existing", look_then_meet)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", KINDS)
def test_writers_racing_with_one_name_end_with_one_object_per_token(
    kind, first, second, live_server, all_looked_first
):
    writers = [agent for agent in (first, second) for _ in range(WRITERS_PER_TOKEN)]
    sent = [(agent.token, *agent.request_for(kind, "the same thing")) for agent in writers]

    with ThreadPoolExecutor(max_workers=len(sent)) as pool:
        answers = list(pool.map(lambda request: post_live(live_server, *request), sent))

    for agent in (first, second):
        theirs = [
            answer for writer, answer in zip(writers, answers, strict=True) if writer is agent
        ]
        assert sorted(status for status, _ in theirs) == [200, 201], theirs
        assert {body["id"] for _, body in theirs} == set(named(kind, agent.token))
        assert len(named(kind, agent.token)) == 1


# --- the migration ----------------------------------------------------------------------

NEW_INDEXES = [
    f"{kind}_external_id_{scope}" for kind in KINDS for scope in ("per_token", "tokenless")
]
OLD_INDEXES = [f"{kind}_unique_external_id" for kind in KINDS]


def latest() -> None:
    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_the_migration_gives_each_run_its_sessions_token_and_keeps_every_name():
    apps = migrate([BEFORE])
    try:
        user = apps.get_model("auth", "User").objects.create(username="owner")
        project = apps.get_model("runs", "Project").objects.create(slug="p", name="P")
        token = apps.get_model("runs", "AgentToken").objects.create(
            project=project, name="old", owner=user, prefix="0123456789", secret_hash="x"
        )
        made = {
            name: apps.get_model("runs", "Run").objects.create(
                project=project,
                session=apps.get_model("runs", "Session").objects.create(
                    project=project, owner=user, agent="a", token=by, external_id=name
                ),
                goal="old work",
                external_id=name,
            )
            for name, by in ((NAME, token), ("in-process", None))
        }
        migrate([MIGRATION])
    finally:
        latest()

    assert dict(Run.objects.values_list("external_id", "token")) == {
        NAME: token.pk,
        "in-process": None,
    }
    ours = Run.objects.get(pk=made[NAME].pk).token
    assert list(identity.found_by_name(Run, ours, NAME).values_list("pk", flat=True)) == [
        made[NAME].pk
    ]
    assert list(identity.found_by_name(Session, ours, NAME).values_list("pk", flat=True)) == [
        made[NAME].session_id
    ]


@pytest.mark.django_db(transaction=True)
def test_the_migration_interrupted_half_way_runs_again_from_the_start():
    """Not atomic (its indexes are built concurrently on PostgreSQL), it can stop with
    the column added and an index not built: run again, it takes each step once."""
    try:
        with connection.schema_editor(atomic=False) as editor:
            editor.execute("DROP INDEX run_external_id_per_token")
        MigrationRecorder(connection).record_unapplied(*MIGRATION)
        migrate([MIGRATION])
        with connection.cursor() as cursor:
            built = connection.introspection.get_constraints(cursor, "runs_run")
        assert {"run_external_id_per_token", "run_external_id_tokenless"} <= set(built)
        assert "run_unique_external_id" not in built
    finally:
        latest()


online = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite builds in its one writer's turn"
)


@online
@pytest.mark.django_db(transaction=True)
def test_every_index_the_migration_builds_or_drops_is_concurrent():
    """A plain ``CREATE INDEX`` or ``DROP INDEX`` stops every writer of its table until
    it ends; a foreign key added valid reads every run meanwhile."""
    migrate([BEFORE])
    said: list[str] = []

    def heard(execute, sql, params, many, context):
        said.append(sql)
        return execute(sql, params, many, context)

    try:
        with connection.execute_wrapper(heard):
            migrate([MIGRATION])
    finally:
        latest()

    built = [sql for sql in said if sql.startswith(("CREATE INDEX", "CREATE UNIQUE INDEX"))]
    dropped = [sql for sql in said if sql.startswith("DROP INDEX")]
    assert all(any(f'"{index}"' in sql for sql in built) for index in NEW_INDEXES), built
    assert all(any(f'"{index}"' in sql for sql in dropped) for index in OLD_INDEXES), dropped
    assert all("CONCURRENTLY" in sql for sql in built + dropped), built + dropped
    keys = [sql for sql in said if "FOREIGN KEY" in sql]
    assert len(keys) == 1 and keys[0].endswith("NOT VALID"), keys
