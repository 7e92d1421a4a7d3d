"""Settings helpers: a typo in the environment stops start-up with a clear message."""

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

from oversight.env import database_from_url, env_bool, env_int, sqlite_database
from tests.helpers import project_settings

VAR = "OVERSIGHT_TEST_SETTING"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        *[(raw, True) for raw in ("1", "true", "True", "YES", " on ")],
        *[(raw, False) for raw in ("0", "false", "No", "OFF", "")],
    ],
)
def test_env_bool_accepts_true_and_false_forms(monkeypatch, raw, expected):
    monkeypatch.setenv(VAR, raw)
    assert env_bool(VAR, default=not expected) is expected


def test_env_bool_falls_back_to_default_when_unset(monkeypatch):
    monkeypatch.delenv(VAR, raising=False)
    assert env_bool(VAR, default=True) is True


def test_env_bool_refuses_anything_else(monkeypatch):
    monkeypatch.setenv(VAR, "maybe")
    with pytest.raises(ImproperlyConfigured, match=VAR):
        env_bool(VAR)


def test_env_int_reads_an_integer(monkeypatch):
    monkeypatch.setenv(VAR, "42")
    assert env_int(VAR, 1, minimum=1) == 42


@pytest.mark.parametrize("raw", ["twelve", "1.5", "", "0"])
def test_env_int_refuses_non_integers_and_values_under_the_minimum(monkeypatch, raw):
    monkeypatch.setenv(VAR, raw)
    with pytest.raises(ImproperlyConfigured, match=VAR):
        env_int(VAR, 1, minimum=1)


def test_database_url_becomes_django_database_settings():
    database = database_from_url("postgres://user:p%40ss@host:5433/name?sslmode=require")
    expected = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "name",
        "USER": "user",
        "PASSWORD": "p@ss",
        "HOST": "host",
        "PORT": "5433",
        "OPTIONS": {"sslmode": "require"},
    }
    assert {key: database[key] for key in expected} == expected


@pytest.mark.parametrize(
    "url", ["mysql://user:pw@host/name", "postgres://user:pw@host/", "postgres://host:port/name"]
)
def test_database_url_refuses_what_it_cannot_use(url):
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL"):
        database_from_url(url)


def test_a_replica_url_s_mistake_names_its_own_variable():
    with pytest.raises(ImproperlyConfigured, match=r"^DATABASE_REPLICA_URL must name a database"):
        database_from_url("postgres://reader@replica.internal/", "DATABASE_REPLICA_URL")


def test_sqlite_database_takes_the_write_lock_up_front_and_uses_wal(tmp_path):
    database = sqlite_database(tmp_path / "db.sqlite3", synchronous="NORMAL")
    options = database["OPTIONS"]
    assert options["transaction_mode"] == "IMMEDIATE"
    assert options["timeout"] > 0
    assert "journal_mode=WAL" in options["init_command"]
    assert "synchronous=NORMAL" in options["init_command"]


def test_sqlite_database_refuses_synchronous_off(tmp_path):
    with pytest.raises(ImproperlyConfigured, match="OFF"):
        sqlite_database(tmp_path / "db.sqlite3", synchronous="OFF")


def test_default_sqlite_database_is_in_wal_mode(db):
    if connection.vendor != "sqlite":
        pytest.skip("DATABASE_URL points at another database")
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone()[0] == "wal"


def test_a_deduplicating_host_must_be_an_allowed_one(monkeypatch):
    with pytest.raises(ImproperlyConfigured, match="OVERSIGHT_HTTP_DEDUPLICATING_HOSTS"):
        project_settings(
            monkeypatch,
            OVERSIGHT_HTTP_ALLOWED_HOSTS="api.example.com",
            OVERSIGHT_HTTP_DEDUPLICATING_HOSTS="api.example.com,payments.example.com",
        )


@pytest.mark.parametrize("name", ["OVERSIGHT_MAX_ATTEMPTS", "OVERSIGHT_AGENT_GRACE_SECONDS"])
def test_attempts_and_grace_are_at_least_one(monkeypatch, name):
    with pytest.raises(ImproperlyConfigured, match=name):
        project_settings(monkeypatch, **{name: "0"})
