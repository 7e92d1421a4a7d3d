"""The documented commands work in any shell, as written: with no OVERSIGHT_SECRET_KEY
(or any other setting) exported, a local installation makes its secret once, keeps it
in its var directory readable by its owner only, and every command after agrees with it;
a bad setting stops a command with one line naming it, never a traceback. Each
``manage.py`` command line of the README and the docs' pages (the Commands page, the
agents' token command…) runs in a subprocess against a fresh installation in a
temporary var directory."""

import re
import stat

import pytest

from runs.management.commands.demo import served_at
from tests.documentation import everything
from tests.processes import FRESH_INSTALLATION, clean_env, manage_in

COMMANDS = list(  # In the order they are documented, each once.
    dict.fromkeys(
        re.findall(r"^\.venv/bin/python manage\.py (.+?)(?:\s+#.*)?$", everything(), re.MULTILINE)
    )
)
pytestmark = [pytest.mark.timeout(300), FRESH_INSTALLATION]


def as_run(line: str, var_dir) -> str:
    """A documented command line made runnable: optional arguments dropped, example paths
    in the temporary installation."""
    line = re.sub(r"\s*\[[^]]*\]", "", line)
    line = line.replace("var/backups/", f"{var_dir}/backups/")
    return line.replace("bundle.zip", str(var_dir / "bundle.zip"))


@pytest.fixture(scope="module")
def installation(tmp_path_factory):
    """A fresh installation with the demo's data, set up with nothing exported."""
    var_dir = tmp_path_factory.mktemp("var")
    env = clean_env(var_dir) | {"OVERSIGHT_DEMO_PASSWORD": "commands-anywhere-password"}
    for setup in ("migrate --no-input", "seed_demo"):
        done = manage_in(setup, env)
        assert done.returncode == 0, done.stderr
    return var_dir


def test_a_secret_that_cannot_be_read_is_one_line(tmp_path):
    (tmp_path / "secret_key").mkdir()
    done = manage_in("check_invariants", clean_env(tmp_path))
    assert done.returncode == 1
    assert done.stderr == (
        f"error: OVERSIGHT_SECRET_KEY is not set and {tmp_path}/secret_key cannot be read "
        "(Is a directory)\n"
    )


def test_the_secret_is_made_once_readable_by_its_owner_only(installation):
    key = installation / "secret_key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    made = key.read_text()
    probe = "shell --no-imports -c 'from django.conf import settings; print(settings.SECRET_KEY)'"
    done = manage_in(probe, clean_env(installation))
    assert done.stdout.strip() == made.strip()
    exported = clean_env(installation) | {"OVERSIGHT_SECRET_KEY": "x" * 40}
    assert manage_in(probe, exported).stdout.strip() == "x" * 40  # the variable wins
    assert key.read_text() == made


def test_every_documented_command_runs_with_nothing_exported(installation):
    assert len(COMMANDS) >= 12, COMMANDS
    env = clean_env(installation)
    (installation / "backups").mkdir(exist_ok=True)
    ran = []
    for line in COMMANDS:
        if line.startswith(("runworker", "verify_evidence")) and "--once" not in line:
            continue  # runs until SIGTERM; needs a downloaded bundle (tested elsewhere)
        done = manage_in(as_run(line, installation), env)
        assert done.returncode == 0, f"{line}: {done.stderr[-2000:]}"
        assert "Traceback" not in done.stderr, line
        ran.append(line.split()[0])
    assert {"runworker", "check_invariants", "create_agent_token", "restore"} <= set(ran)


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("OVERSIGHT_DEBUG", "maybe", "error: OVERSIGHT_DEBUG must be true or false, not 'maybe'"),
        (
            "OVERSIGHT_SECRET_KEY",
            "short",
            "error: OVERSIGHT_SECRET_KEY must be at least 32 characters",
        ),
        (
            "OVERSIGHT_LOG_FORMAT",
            "xml",
            "error: OVERSIGHT_LOG_FORMAT must be text or json, not 'xml'",
        ),
        (
            "OVERSIGHT_LOG_LEVEL",
            "verbose",
            "error: OVERSIGHT_LOG_LEVEL must be DEBUG, INFO, WARNING, ERROR or CRITICAL, "
            "not 'verbose'",
        ),
        (
            "OVERSIGHT_SECRET_KEY",
            "",
            "error: OVERSIGHT_SECRET_KEY is empty: set a key, or unset the variable",
        ),
        (
            "DATABASE_URL",
            "postgres://oversight@db.internal/oversight",
            "error: OVERSIGHT_SECRET_KEY must be set with DATABASE_URL: every machine sharing "
            "the database needs the same key",
        ),
        (
            "DATABASE_REPLICA_URL",
            "postgres://reader@replica.internal/oversight",
            "error: DATABASE_REPLICA_URL needs DATABASE_URL: a replica copies a PostgreSQL primary",
        ),
    ],
)
def test_a_bad_setting_stops_a_command_with_one_line(installation, name, value, said):
    done = manage_in("check_invariants", clean_env(installation) | {name: value})
    assert done.returncode == 1
    assert done.stderr == f"{said}\n"


@pytest.mark.parametrize(
    ("addr", "base"),
    [
        ("127.0.0.1:8100", "http://127.0.0.1:8100"),
        ("0.0.0.0:8000", "http://127.0.0.1:8000"),
        ("8200", "http://127.0.0.1:8200"),
        ("oversight.lan:8300", "http://oversight.lan:8300"),
    ],
)
def test_the_demo_s_links_point_where_it_serves(addr, base):
    assert served_at(addr) == base
