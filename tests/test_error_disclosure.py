"""What agents, alerts and alert emails are told when an action fails (#11, hole 9): the
file as the agent named it and fixed words for the error. An exception's own text,
with the server's absolute paths, stays in the server log (the agent's arguments cut
out of it), where the operator finds it by the operation's id."""

import errno
import json
import os
import socket

import pytest
from django.core import mail

from runs.actions.files import workspace_of
from runs.canonical import sha256_hex
from runs.engine.boundaries import EXECUTED
from runs.engine.deliveries import deliver_due
from runs.models import Alert
from tests.api_helpers import ServerAgent
from tests.helpers import blob

pytest_plugins = ["tests.api_helpers"]

PATH = "notes/today.md"
EMAIL = {"to": ["ops@example.com"], "subject": "Report", "body": "All green."}


@pytest.fixture
def agent(api, reviewer) -> ServerAgent:
    return ServerAgent(api, reviewer)


def write(agent: ServerAgent, call_id: str, path: str = PATH, expected=None) -> dict:
    arguments = {"path": path, "content": "hello\n", "expected_sha256": expected}
    return agent.executed(call_id, "file.write", arguments, "in_band")


def seen_by(agent: ServerAgent, op: dict) -> str:
    """All the agent can read of the operation: itself and its run's checkpoints."""
    checkpoints = agent.api.get(f"/runs/{agent.run}/checkpoints").json()
    return json.dumps([op, checkpoints])


def discreet(text: str, server_path) -> bool:
    """No absolute server path and no raw OSError text in ``text``."""
    return str(server_path) not in text and "Errno" not in text


def test_a_write_that_cannot_make_its_folder_names_only_the_agents_path(
    agent, project, tmp_path, caplog
):
    assert write(agent, "a-file", path="notes")["status"] == "committed"

    op = write(agent, "in-the-way")

    assert op["status"] == "failed"
    assert op["status_reason"] == (
        f"the effect did not happen: {PATH} could not be written: "
        "its folder could not be made (file exists)"
    )
    assert discreet(seen_by(agent, op), tmp_path)
    assert str(workspace_of(project) / "notes") in caplog.text  # The operator's account.


def test_a_failed_rollback_alerts_without_server_paths_in_summary_or_email(
    agent, project, admin_user, at_boundary, settings, tmp_path, caplog
):
    """The worker cannot re-read the file it wrote and gives up, and the previous
    version's blob was replaced by a folder: restoring it fails. A person is alerted."""
    settings.OVERSIGHT_MAX_ATTEMPTS = 1
    target = workspace_of(project) / PATH
    target.parent.mkdir(parents=True)
    target.write_text("previous\n")
    kept = blob(sha256_hex(b"previous\n"))

    def unreadable_and_previous_lost(_op) -> None:
        kept.unlink()
        kept.mkdir()
        raise OSError(errno.EIO, os.strerror(errno.EIO), str(target))  # Re-reading it.

    at_boundary(EXECUTED, unreadable_and_previous_lost)

    op = write(agent, "restore", expected=sha256_hex(b"previous\n"))

    assert op["status"] == "alerted"
    alert = Alert.objects.get(operation_id=op["id"])
    assert alert.summary.endswith(
        f"the in_band rollback failed: {PATH} could not be restored: is a directory"
    )
    deliver_due()
    (email,) = mail.outbox
    assert email.to == [admin_user.email]
    for text in (seen_by(agent, op), alert.summary, email.subject, email.body):
        assert discreet(text, tmp_path), text
    # The operator's account: the server's folders, without the agent's arguments.
    assert f"{workspace_of(project)}/[argument]" in caplog.text
    assert f"{kept.parent}/[argument]" in caplog.text


def test_an_unexpected_error_is_named_not_quoted(agent, settings, tmp_path, caplog):
    """A mail backend misconfigured by the operator fails with its folder's path in the
    message: the agent and the alert get the kind of error only."""
    occupied = tmp_path / "outgoing-mail"
    occupied.write_text("a file, not a folder\n")
    settings.MAILERS = {
        "default": {
            "BACKEND": "django.core.mail.backends.filebased.EmailBackend",
            "OPTIONS": {"file_path": str(occupied)},
        }
    }

    op = agent.executed("report", "email.send", EMAIL, "out_of_band")

    assert op["status"] == "alerted"
    assert op["status_reason"].startswith(
        "verification failed (an unexpected InvalidMailer, logged on the server)"
    )
    alert = Alert.objects.get(operation_id=op["id"])
    assert discreet(seen_by(agent, op), tmp_path) and discreet(alert.summary, tmp_path)
    assert str(occupied) in caplog.text


def test_a_refused_mail_server_is_described_not_quoted(agent, settings):
    with socket.socket() as probe:  # A port on which nothing listens.
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings.MAILERS = {
        "default": {
            "BACKEND": "django.core.mail.backends.smtp.EmailBackend",
            "OPTIONS": {"host": "127.0.0.1", "port": port, "timeout": 5},
        }
    }

    op = agent.executed("report", "email.send", EMAIL, "out_of_band")

    assert op["status"] == "failed"
    assert op["status_reason"] == (
        "the effect did not happen: the mail server refused the connection"
    )
    assert "Errno" not in seen_by(agent, op)
