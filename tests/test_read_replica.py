"""The auditors' heavy reads come from a read replica (``DATABASE_REPLICA_URL``,
``runs.replica``): a second PostgreSQL database fed from the test's own by logical
replication, on the same server, and a web process serving with both. The replication
is paused (the subscription disabled) to make it lag, as a replica far away or busy
does: the audit search, its export, the numbers page and an evidence bundle then show
the replica's moment and say how far behind it is, while the operation's own page and
who may see what come from the primary."""

import csv
import io
import json
import subprocess
import urllib.error
import urllib.request
import zipfile

import psycopg
import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from runs.audit.evidence import bundle_problems
from runs.models import Checkpoint, Membership
from runs.services.runs import start_run
from tests.conftest import AGENT
from tests.processes import Output, listening_port, manage_started, wait_until

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="a replica copies a PostgreSQL primary"
    ),
]


AS_SUPERUSER = ["runuser", "-u", "postgres", "--"]


def as_superuser(database: str, sql: str = "", *, given: str | None = None) -> str:
    """``sql`` (or the script ``given``) run by PostgreSQL's superuser, as bin/postgres-dev
    does its own setup: subscriptions need one."""
    command = ["-c", sql] if sql else []
    done = subprocess.run(
        [*AS_SUPERUSER, "psql", "-v", "ON_ERROR_STOP=1", "-qtA", "-d", database, *command],
        input=given,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


class Replication:
    """The test database (the primary) published whole, and a database named after it,
    with an empty copy of its schema, subscribed to it. The subscription copies no rows
    already there (each table's first copy waits for every transaction running on the
    server, and the rest of the suite holds some): the test makes its rows after."""

    def __init__(self, primary: str) -> None:
        self.primary, self.replica = primary, f"{primary}_replica"
        self.names = f"{primary}_feed"  # The publication's, the slot's, the subscription's.

    def start(self) -> None:
        wal_level = as_superuser(self.primary, "SHOW wal_level")
        assert wal_level == "logical", "bin/postgres-dev sets wal_level = logical (a restart)"
        self.stop()  # Whatever a test killed before its end left behind.
        as_superuser("postgres", f"CREATE DATABASE {self.replica} OWNER oversight")
        schema = subprocess.run(
            [*AS_SUPERUSER, "pg_dump", "--schema-only", "-d", self.primary],
            capture_output=True,
            text=True,
            check=True,
        )
        as_superuser(self.replica, given=schema.stdout)
        as_superuser(self.primary, f"CREATE PUBLICATION {self.names} FOR ALL TABLES")
        # A slot made beforehand: CREATE SUBSCRIPTION waits forever for one it would make
        # on its own server.
        as_superuser(
            self.primary, f"SELECT pg_create_logical_replication_slot('{self.names}', 'pgoutput')"
        )
        as_superuser(
            self.replica,
            f"CREATE SUBSCRIPTION {self.names} CONNECTION "
            f"'dbname={self.primary} host=/var/run/postgresql user=postgres' "
            f"PUBLICATION {self.names} "
            f"WITH (create_slot = false, slot_name = '{self.names}', copy_data = false)",
        )

    def pause(self) -> None:
        as_superuser(self.replica, f"ALTER SUBSCRIPTION {self.names} DISABLE")

    def resume(self) -> None:
        as_superuser(self.replica, f"ALTER SUBSCRIPTION {self.names} ENABLE")

    def stop(self) -> None:
        """Everything ``start`` made, gone: the subscription (and with it its slot), the
        replica, any slot left on the primary's database, the publication."""
        subscribed = f"SELECT 1 FROM pg_subscription WHERE subname = '{self.names}'"
        if as_superuser("postgres", subscribed) == "1":
            as_superuser(self.replica, f"DROP SUBSCRIPTION {self.names}")
        as_superuser("postgres", f"DROP DATABASE IF EXISTS {self.replica} WITH (FORCE)")
        slots = f"FROM pg_replication_slots WHERE database = '{self.primary}'"
        # A sender stops a moment after its subscription is gone.
        wait_until(
            lambda: as_superuser(self.primary, f"SELECT count(*) {slots} AND active") == "0",
            message="the slots let go",
        )
        as_superuser(self.primary, f"SELECT pg_drop_replication_slot(slot_name) {slots}")
        as_superuser(self.primary, f"DROP PUBLICATION IF EXISTS {self.names}")


@pytest.fixture
def replication(transactional_db):
    feed = Replication(connection.settings_dict["NAME"])
    try:
        feed.start()
        yield feed
    finally:
        feed.stop()


class Served:
    """A web process on the test's database with ``replica`` as its read replica, and
    the people signed in to it."""

    def __init__(self, replica: str) -> None:
        self.process = manage_started(
            "runserver", "--noreload", "127.0.0.1:0", OVERSIGHT_TEST_REPLICA_NAME=replica
        )
        port = listening_port(Output(self.process.stdout), self.process)
        self.url = f"http://127.0.0.1:{port}"
        self.cookies: dict[int, str] = {}

    def get(self, user, path: str) -> tuple[int, bytes, dict]:
        """``user``'s GET of ``path``: its status, body and headers."""
        if user.pk not in self.cookies:
            client = Client()
            client.force_login(user)
            self.cookies[user.pk] = client.cookies["sessionid"].value
        request = urllib.request.Request(
            self.url + path, headers={"Cookie": f"sessionid={self.cookies[user.pk]}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return answer.status, answer.read(), dict(answer.headers)
        except urllib.error.HTTPError as refused:
            return refused.code, refused.read(), dict(refused.headers)

    def page(self, user, path: str) -> str:
        status, body, _ = self.get(user, path)
        assert status == 200, (path, status)
        return body.decode()


@pytest.fixture
def served(replication):
    server = Served(replication.replica)
    yield server
    server.process.kill()
    server.process.wait()


def on_replica(replica: str, pk: int) -> bool:
    own = connection.settings_dict
    server = {"host": own["HOST"], "port": own["PORT"] or 5432, "user": own["USER"]}
    with psycopg.connect(**server, password=own["PASSWORD"], dbname=replica) as db:
        found = db.execute("SELECT 1 FROM runs_checkpoint WHERE id = %s", [pk]).fetchone()
    return found is not None


def links(page: str, checkpoints: list[int]) -> set[int]:
    """Which of ``checkpoints`` the page links to."""
    return {pk for pk in checkpoints if f'href="/audit/checkpoints/{pk}/"' in page}


def test_the_auditors_pages_show_the_replica_and_say_how_far_behind_it_is(
    replication, served, propose, auditor, admin_user
):
    replica = replication.replica
    first = propose("call-1")
    seen = list(first.checkpoints.values_list("pk", flat=True))
    wait_until(lambda: on_replica(replica, seen[-1]), message="the first operation replicated")
    page = served.page(auditor, "/audit/")
    assert links(page, seen) == set(seen)
    assert 'id="replica-lag"' not in page

    replication.pause()
    second = propose("call-2")
    unseen = list(second.checkpoints.values_list("pk", flat=True))
    assert unseen and not any(on_replica(replica, pk) for pk in unseen)

    page = served.page(auditor, "/audit/")
    assert links(page, seen + unseen) == set(seen)  # The replica's moment.
    assert "Read from a replica that is" in page
    assert "s behind: checkpoints written since" in page
    # The operation's own page reads the primary: it is there.
    assert served.get(auditor, f"/operations/{second.pk}/")[0] == 200

    on_the_replica = Checkpoint.objects.exclude(pk__in=unseen).values_list("pk", flat=True)
    assert exported_ids(served, auditor, lagging=True) == sorted(on_the_replica)

    numbers = served.page(admin_user, reverse("numbers", args=["acme"]))
    assert "Read from a replica that is" in numbers

    replication.resume()
    wait_until(lambda: on_replica(replica, unseen[-1]), message="the replica caught up")
    page = served.page(auditor, "/audit/")
    assert links(page, seen + unseen) == set(seen + unseen)
    assert 'id="replica-lag"' not in page


def test_an_evidence_bundle_is_one_moment_of_the_replica_or_the_primary_s(
    replication, served, run, propose, auditor
):
    propose("call-1")
    version = run.checkpoints.count()
    newest = run.checkpoints.latest("seq").pk
    wait_until(lambda: on_replica(replication.replica, newest), message="replicated")
    replication.pause()
    propose("call-2")

    content, problems = bundle_of(served, auditor, run.pk)
    assert (content["bundle"]["read_from"], problems) == ("replica", [])
    assert len(content["checkpoints"]) == content["run"]["version"] == version

    later = propose("call-3", target=other_run(run))
    content, problems = bundle_of(served, auditor, later.run_id)  # Not on the replica yet.
    assert (content["bundle"]["read_from"], problems) == ("primary", [])
    assert len(content["checkpoints"]) == later.run.checkpoints.count()


def test_who_may_see_what_is_read_from_the_primary(replication, served, propose, auditor):
    operation = propose("call-1")
    seen = operation.checkpoints.latest("pk").pk
    wait_until(lambda: on_replica(replication.replica, seen), message="replicated")
    assert links(served.page(auditor, "/audit/"), [seen]) == {seen}

    replication.pause()
    Membership.objects.filter(user=auditor).delete()  # On the replica, still a member.
    assert links(served.page(auditor, "/audit/"), [seen]) == set()
    assert exported_ids(served, auditor) == []
    assert served.get(auditor, f"/audit/runs/{operation.run_id}/evidence.zip")[0] == 404


def test_a_replica_out_of_reach_is_a_503_and_the_rest_works(propose, auditor):
    operation = propose("call-1")
    server = Served("no_such_replica")
    try:
        status, _, headers = server.get(auditor, "/audit/")
        assert status == 503
        assert int(headers["Retry-After"]) > 0
        assert server.get(auditor, f"/operations/{operation.pk}/")[0] == 200
    finally:
        server.process.kill()
        server.process.wait()


def exported_ids(served: Served, user, lagging: bool = False) -> list[int]:
    """The checkpoints a CSV export holds; its header says since when the replica lacks
    the primary's checkpoints exactly when ``lagging``."""
    text = served.page(user, reverse("audit-export-csv"))
    assert ("# replica_lacks_checkpoints_since: " in text) == lagging
    rows = csv.DictReader(line for line in io.StringIO(text) if not line.startswith("#"))
    return sorted(int(row["id"]) for row in rows)


def bundle_of(served: Served, user, run_pk: int) -> tuple[dict, list[str]]:
    status, body, _ = served.get(user, f"/audit/runs/{run_pk}/evidence.zip")
    assert status == 200
    archive = zipfile.ZipFile(io.BytesIO(body))
    return json.loads(archive.read("evidence.json")), bundle_problems(archive)


def other_run(run):
    return start_run(session=run.session, goal="Another run", actor=AGENT)
