"""Logs an on-call engineer can follow (#37, item 3): every web request has an id (the
proxy's, or one made), given back in its header, on each of its log lines and in the
API's error bodies, with one access line per request; a worker's lines name it, and a
failure that repeats (the database down) is one traceback and a count, not two a second;
the probes answer whatever Host a load balancer sends."""

import json
import logging
import re
import signal
import socket
import subprocess
import sys
import threading
from contextlib import suppress

import pytest

from runs.engine.worker import Worker
from runs.logs import Context, JsonFormatter, Repeats
from tests.helpers import shown
from tests.processes import ROOT, child_env, wait_until

MADE = re.compile(r"[0-9a-f]{32}")


def access_lines(caplog) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == "oversight.access"]


def as_json(record: logging.LogRecord) -> dict:
    """The record as the JSON log writes it, after the log's own filter."""
    Context().filter(record)
    return json.loads(JsonFormatter().format(record))


def test_a_proxys_request_id_is_kept_and_a_missing_one_made(client, db, caplog):
    caplog.set_level(logging.INFO, logger="oversight.access")

    given = client.get("/accounts/login/", HTTP_X_REQUEST_ID="lb-7f3a:01")
    made = client.get("/accounts/login/")
    odd = client.get("/accounts/login/", HTTP_X_REQUEST_ID="two words" + "x" * 200)

    assert given["X-Request-ID"] == "lb-7f3a:01"
    assert MADE.fullmatch(made["X-Request-ID"])
    assert MADE.fullmatch(odd["X-Request-ID"])  # not a header to copy into every line
    first = as_json(access_lines(caplog)[0])
    assert first["request_id"] == "lb-7f3a:01"
    assert first["message"] == "GET /accounts/login/ 200 " + f"{first['duration_ms']} ms"
    assert first["status"] == 200


def test_the_access_line_names_the_person_never_the_query(client, reviewer, caplog):
    caplog.set_level(logging.INFO, logger="oversight.access")
    client.force_login(reviewer)

    client.get("/audit/?q=secret-words")

    (line,) = [as_json(record) for record in access_lines(caplog)]
    assert line["message"].startswith("GET /audit/ 200 ")
    assert line["by"] == "reviewer"
    assert "secret-words" not in json.dumps(line)


def test_a_path_cannot_write_a_line_of_its_own(client, db, caplog):
    caplog.set_level(logging.INFO, logger="oversight.access")

    client.get("/nowhere%0AGET /admin/ 200 1 ms")

    (line,) = access_lines(caplog)
    assert "\n" not in line.getMessage()
    assert line.getMessage().startswith("GET /nowhere%0AGET%20/admin/%20200%201%20ms 404 ")


def test_an_api_error_names_its_request(client, db):
    answer = client.get(
        "/api/v1/runs/1", HTTP_AUTHORIZATION="Bearer nope", HTTP_X_REQUEST_ID="agent-42"
    )

    assert answer.status_code == 401
    assert answer.json()["request_id"] == "agent-42" == answer["X-Request-ID"]


@pytest.mark.django_db(transaction=True)  # the lines of a change are written once it commits
def test_one_approval_is_followed_from_the_page_to_the_workers_commit(
    client, reviewer, propose, accounts, caplog
):
    """The acceptance's join: the lines of the reviewer's request and the worker's lines
    meet on the operation's id, and the request's lines on its request id."""
    caplog.set_level(logging.INFO)
    operation = propose("call-1")
    client.force_login(reviewer)

    form = {"kind": "approve", "arguments_hash": operation.arguments_hash}
    form |= shown(client, operation)
    caplog.clear()

    answer = client.post(
        f"/operations/{operation.pk}/decide/", form, HTTP_X_REQUEST_ID="req-approve-1"
    )
    assert answer.status_code == 302
    Worker("worker-a").drain()

    lines = [as_json(record) for record in caplog.records]
    about = [line for line in lines if line.get("operation_id") == operation.pk]
    in_request = [line for line in about if line.get("request_id") == "req-approve-1"]
    assert any("approved" in line["message"] for line in in_request)
    assert any("committed" in line["message"] for line in about if "request_id" not in line)
    access = [line for line in lines if line["logger"] == "oversight.access"]
    assert [line["request_id"] for line in access] == ["req-approve-1"]


def test_the_probes_answer_a_load_balancer_probing_by_address(client, db, settings):
    settings.OVERSIGHT_METRICS_TOKEN = "m" * 40

    health = client.get("/healthz", HTTP_HOST="10.0.3.7:8000")
    assert health.status_code in {200, 503}  # 503: no worker runs in this test
    assert "workers" in health.json()["checks"]
    metrics = client.get(
        "/metrics", HTTP_HOST="10.0.3.7:8000", HTTP_AUTHORIZATION=f"Bearer {'m' * 40}"
    )
    assert metrics.status_code == 200
    unsigned = client.get("/metrics", HTTP_HOST="10.0.3.7:8000")
    assert unsigned.status_code in {401, 403, 404}
    # Every other page keeps Django's check of the host.
    assert client.get("/accounts/login/", HTTP_HOST="10.0.3.7:8000").status_code == 400


def test_a_repeated_failure_is_one_traceback_and_a_count_a_minute(caplog):
    now = [0.0]
    repeats = Repeats(logging.getLogger("test.repeats"), interval=60, clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="test.repeats")

    for second in range(120):  # the database down for a minute, a failure each half second
        now[0] = second / 2
        repeats.failed("worker w1: step", ConnectionError("database unreachable"))
    now[0] = 61
    repeats.worked("worker w1: step")

    said = [
        (record.levelname, record.getMessage(), bool(record.exc_info)) for record in caplog.records
    ]
    assert said == [
        ("ERROR", "worker w1: step failed", True),
        (
            "ERROR",
            "worker w1: step failed 119 more times in 61 s, the last: "
            "ConnectionError: database unreachable",
            False,
        ),
        ("WARNING", "worker w1: step works again", False),
    ]


class HangingUp:
    """Where the worker's database should be: a port that takes each connection and
    closes it at once, counting them (each a step's, or a thread's, try)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.tries = 0
        threading.Thread(target=self._refuse, daemon=True).start()

    def _refuse(self) -> None:
        with suppress(OSError):  # closed at the end of the test
            while True:
                self.listener.accept()[0].close()
                self.tries += 1


def test_a_worker_without_its_database_logs_its_name_and_no_flood(tmp_path):
    """A real worker whose database hangs up on it: its lines name it, and after twenty
    failed tries it has written a traceback per kind of failure, not one per try."""
    database = HangingUp()
    env = {
        **child_env(),
        "DATABASE_URL": f"postgres://oversight:x@127.0.0.1:{database.port}/nowhere",
        "OVERSIGHT_LOG_FORMAT": "json",
        "OVERSIGHT_VAR_DIR": str(tmp_path),
    }
    env.pop("OVERSIGHT_TEST_DB_NAME")
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "runworker", "--name=night-shift"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: database.tries >= 20, message="twenty tries", process=worker)
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
        database.listener.close()

    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    failures = [line for line in lines if line["level"] == "ERROR"]
    assert failures, err[-2000:]
    assert {line.get("worker") for line in lines} == {"night-shift"}
    tracebacks = [line for line in failures if "exception" in line]
    assert len(tracebacks) <= 4, [line["message"] for line in tracebacks]
