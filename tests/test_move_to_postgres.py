"""From SQLite to PostgreSQL (#39 item 4): ``manage.py move_to_postgres`` copies a real
SQLite installation (made by its own commands, in a folder of its own) into an empty
PostgreSQL database on the suite's server. Every table keeps every row, every
checkpoint its hash, and the chains verify there; the moved installation goes on
writing (its sequences start past the rows copied); the artifacts go into an object
store when asked. It refuses while a worker runs, into a database that holds an
installation, and from PostgreSQL. Runs in the PostgreSQL suite, which has the server."""

import os
import sqlite3
import subprocess
import sys
import uuid

import psycopg
import pytest
from django.db import connection

from tests.processes import ROOT, clean_env, manage_in, wait_until
from tests.test_object_store import PREFIX, bucket, s3_server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the PostgreSQL suite has the server to move into"
)


def server(database: str) -> dict:
    own = connection.settings_dict
    return {
        "host": own["HOST"],
        "port": own["PORT"] or 5432,
        "user": own["USER"],
        "password": own["PASSWORD"],
        "dbname": database,
    }


@pytest.fixture
def target():
    """An empty database on the suite's server; its URL carries no password (the
    command's environment does, in PGPASSWORD)."""
    name = f"oversight_move_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(**server("postgres"), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    own = server(name)
    try:
        yield f"postgres://{own['user']}@{own['host']}:{own['port']}/{name}"
    finally:
        with psycopg.connect(**server("postgres"), autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture
def installation(tmp_path) -> dict[str, str]:
    """A SQLite installation with the demo's projects, users, runs, checkpoints and
    artifacts; its environment."""
    env = clean_env(tmp_path / "var") | {"PGPASSWORD": connection.settings_dict["PASSWORD"]}
    for line in ("migrate", "seed_demo"):
        assert manage_in(line, env).returncode == 0
    return env


def rows(sqlite_file, table: str) -> int:
    with sqlite3.connect(sqlite_file) as db:
        return db.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]


def tables(sqlite_file) -> list[str]:
    with sqlite3.connect(sqlite_file) as db:
        found = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return sorted(name for (name,) in found if not name.startswith(("sqlite_", "django_mig")))


def hashes(execute) -> list[tuple]:
    return list(execute("SELECT id, run_id, seq, hash FROM runs_checkpoint ORDER BY id"))


def test_every_row_moves_and_the_chains_verify_there(installation, target):
    sqlite_file = f"{installation['OVERSIGHT_VAR_DIR']}/oversight.sqlite3"
    moved = manage_in(f"move_to_postgres {target}", installation)
    assert moved.returncode == 0, moved.stderr
    assert "verify_audit_chain on" in moved.stdout
    assert "all invariants hold" in moved.stdout

    with psycopg.connect(target, password=connection.settings_dict["PASSWORD"]) as moved_db:
        for table in tables(sqlite_file):
            count = moved_db.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
            assert count == rows(sqlite_file, table), table
        with sqlite3.connect(sqlite_file) as db:
            assert hashes(moved_db.execute) == hashes(db.execute)
        assert rows(sqlite_file, "runs_checkpoint") > 10
        assert rows(sqlite_file, "runs_artifact") > 0
        open_run = moved_db.execute(
            "SELECT id FROM runs_run WHERE status NOT IN ('completed', 'failed', 'cancelled') "
            "ORDER BY id LIMIT 1"
        ).fetchone()[0]

    # The moved installation writes on: a cancel adds a checkpoint past the copied ones.
    on_postgres = installation | {"DATABASE_URL": target, "OVERSIGHT_SECRET_KEY": "k" * 40}
    cancel = manage_in(f"cancel_run {open_run} --reason Moved --as admin", on_postgres)
    assert cancel.returncode == 0, cancel.stderr
    verified = manage_in("verify_audit_chain", on_postgres)
    assert verified.returncode == 0, verified.stderr

    again = manage_in(f"move_to_postgres {target}", installation)
    assert again.returncode == 1
    assert "holds an installation already" in again.stderr.strip().splitlines()[-1]


def test_the_artifacts_move_into_an_object_store(installation, target, bucket):  # noqa: F811
    client, name = bucket
    endpoint = client.meta.endpoint_url
    store = f"s3://{name}/{PREFIX}?endpoint_url={endpoint}&region=us-east-1&addressing_style=path"
    # The store's key, which the bucket's fixture set in this process after the
    # installation's environment was taken.
    keys = {name: os.environ[name] for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    moving = f"move_to_postgres {target} --artifact-store '{store}'"
    moved = manage_in(moving, installation | keys)
    assert moved.returncode == 0, moved.stderr
    sqlite_file = f"{installation['OVERSIGHT_VAR_DIR']}/oversight.sqlite3"
    with sqlite3.connect(sqlite_file) as db:
        named = {sha for (sha,) in db.execute("SELECT sha256 FROM runs_artifact")}
    listed = client.list_objects_v2(Bucket=name, Prefix=PREFIX)["Contents"]
    assert {item["Key"].rsplit("/", 1)[-1] for item in listed} >= named
    assert f"copied {len(named)} artifacts" in moved.stdout
    assert "all invariants hold" in moved.stdout  # Checked against the store.


def test_a_running_worker_refuses_the_move(installation, target):
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "runworker", "--name=still-running"],
        cwd=ROOT,
        env=installation,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        sqlite_file = f"{installation['OVERSIGHT_VAR_DIR']}/oversight.sqlite3"
        wait_until(lambda: rows(sqlite_file, "runs_workerheartbeat"), message="a heartbeat")
        refused = manage_in(f"move_to_postgres {target}", installation)
    finally:
        worker.kill()
        worker.wait()
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        "CommandError: workers are running (still-running): stop them first: "
        "they would go on from the SQLite database"
    )


def test_bad_targets_are_refused_in_one_line(installation, target):
    unreachable = manage_in("move_to_postgres postgres://nobody@127.0.0.1:1/none", installation)
    assert unreachable.returncode == 1
    assert unreachable.stderr.startswith("CommandError: cannot reach the PostgreSQL database")
    not_postgres = manage_in("move_to_postgres mysql://a@b/c", installation)
    assert not_postgres.stderr.strip() == (
        "CommandError: the PostgreSQL URL must start with postgres:// or postgresql://, "
        "not 'mysql'://"
    )
    on_postgres = installation | {"DATABASE_URL": target, "OVERSIGHT_SECRET_KEY": "k" * 40}
    assert manage_in("migrate", on_postgres).returncode == 0
    from_postgres = manage_in(f"move_to_postgres {target}", on_postgres)
    assert from_postgres.stderr.strip() == (
        "CommandError: this installation runs on PostgreSQL already (DATABASE_URL is set)"
    )
