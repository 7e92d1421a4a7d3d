"""The production deployment as the README gives it: the Procfile's web and worker lines
start with production settings behind a (simulated) TLS proxy, a person signs in,
static files come from WhiteNoise, /healthz turns healthy once the worker beats, and
every line both log is one JSON object; the systemd units name commands and options
that exist."""

import http.client
import json
import re
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http.cookies import SimpleCookie
from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class

from tests.processes import (
    FRESH_INSTALLATION,
    ROOT,
    Output,
    clean_env,
    listening_port,
    manage_in,
    wait_until,
)
from tests.test_api_waits import LONGEST_WAIT

pytestmark = [pytest.mark.timeout(180), FRESH_INSTALLATION]
PASSWORD = "production-server-password"
PROCFILE = dict(
    line.split(":", 1) for line in (ROOT / "Procfile").read_text().splitlines() if ":" in line
)
UNITS = ROOT / "deploy" / "systemd"


class Browser:
    """A browser behind the TLS proxy: every request says it came over HTTPS, and the
    cookies set (HTTPS-only ones included) are sent back."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.cookies = SimpleCookie()

    def request(self, method: str, path: str, body: str = "", proxied: bool = True):
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        headers = {"Cookie": "; ".join(f"{k}={m.value}" for k, m in self.cookies.items())}
        if proxied:
            headers["X-Forwarded-Proto"] = "https"
        if method == "POST":
            headers["Content-Type"] = "application/x-www-form-urlencoded"
            headers["Origin"] = f"https://127.0.0.1:{self.port}"
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        text = response.read().decode()
        for cookie in response.headers.get_all("Set-Cookie") or []:
            self.cookies.load(cookie)
        connection.close()
        return response, text


def start(name: str, env: dict[str, str]) -> subprocess.Popen:
    """The Procfile's ``name`` line, as a process manager would start it."""
    return subprocess.Popen(
        ["bash", "-c", f"exec {PROCFILE[name].strip()}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def healthz(browser: Browser, until: set[int], process: subprocess.Popen) -> str:
    """/healthz's page, once it answers with a status of ``until``."""

    def answered() -> str | None:
        response, text = browser.request("GET", "/healthz", proxied=False)
        return text if response.status in until else None

    return wait_until(answered, message=f"/healthz answering {until}", process=process)


def stop(process: subprocess.Popen) -> int:
    process.send_signal(signal.SIGTERM)
    return process.wait(timeout=60)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """A fresh production installation on SQLite, migrated by the Procfile's release
    line, with the demo's people."""
    var_dir = tmp_path_factory.mktemp("var")
    env = clean_env(var_dir) | {
        "OVERSIGHT_DEMO_PASSWORD": PASSWORD,
        "OVERSIGHT_PROXY_SSL_HEADER": "X-Forwarded-Proto=https",
        "OVERSIGHT_LOG_FORMAT": "json",
    }
    release = start("release", env)
    assert release.wait(timeout=120) == 0, release.stdout.read()
    done = manage_in("seed_demo", env)
    assert done.returncode == 0, done.stderr
    return env


def test_the_procfile_serves_signed_in_pages_and_turns_healthy_with_its_worker(deployment):
    web = start("web", deployment | {"PORT": "0"})
    said = Output(web.stdout)
    worker = None
    try:
        port = listening_port(said, web)
        browser = Browser(port)
        assert '"workers": {"ok": false' in healthz(browser, {503}, web)
        worker = start("worker", deployment)
        assert '"ok": true' in healthz(browser, {200}, web)

        plain, _ = browser.request("GET", "/accounts/login/", proxied=False)
        assert plain.status == 301
        assert plain.headers["Location"] == f"https://127.0.0.1:{port}/accounts/login/"
        # A header named with an underscore is not taken for the proxy's own.
        sly = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        sly.request("GET", "/accounts/login/", headers={"X_Forwarded_Proto": "https"})
        assert sly.getresponse().status == 301
        sly.close()

        page, form = browser.request("GET", "/accounts/login/")
        assert page.status == 200
        assert page.headers["Strict-Transport-Security"].startswith("max-age=")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)[1]
        signed_in, _ = browser.request(
            "POST",
            "/accounts/login/",
            f"csrfmiddlewaretoken={token}&username=reviewer&password={PASSWORD}",
        )
        assert signed_in.status == 302, "the right password signs in"
        assert browser.cookies["sessionid"]["secure"]

        home, html = browser.request("GET", signed_in.headers["Location"])
        assert home.status == 200
        assert "reviewer" in html
        stylesheet = re.search(r'href="(/static/oversight\.[0-9a-f]{12}\.css)"', html)[1]
        css, _ = browser.request("GET", stylesheet)
        assert css.status == 200
        assert "immutable" in css.headers["Cache-Control"]
    finally:
        assert stop(web) == 0
        if worker is not None:
            assert stop(worker) == 0
    for lines in (said.text().splitlines(), worker.stdout.read().splitlines()):
        assert lines and all(json.loads(line)["message"] for line in lines), "one JSON each"


def test_the_server_refuses_no_processes_or_threads(deployment):
    for option in ("--processes", "--threads"):
        done = manage_in(f"serve {option} 0", deployment)
        assert done.returncode == 1
        assert done.stderr.strip().splitlines() == [
            f"CommandError: {option} must be at least 1, not 0"
        ]


WAITS = 200


def api(port: int, token: str, method: str, path: str, body: dict | None = None):
    """An agent's request to the server's API: its status and decoded body."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "X-Forwarded-Proto": "https",  # Through the TLS proxy.
    }
    connection.request(method, f"/api/v1{path}", json.dumps(body) if body else None, headers)
    response = connection.getresponse()
    answer = response.status, json.loads(response.read() or "null")
    connection.close()
    return answer


def children(pid: int) -> list[int]:
    """The processes ``pid`` started (gunicorn's workers)."""
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def threads(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/task").iterdir()))


def flocks_held(pid: int) -> int:
    """How many ``flock`` locks process ``pid`` holds (in /proc/locks: ``FLOCK … pid``)."""
    fields = [line.split() for line in Path("/proc/locks").read_text().splitlines()]
    return sum(1 for f in fields if f[1] == "FLOCK" and f[4] == str(pid))


def issued(deployment, project: str, name: str) -> str:
    made = manage_in(
        f"create_agent_token --project {project} --name {name} --issued-by admin", deployment
    )
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


@contextmanager
def small_server(env: dict[str, str]) -> Iterator[tuple[int, subprocess.Popen]]:
    """``serve`` with one process of two threads for requests, listening on the port the
    system gave it; its port and process, stopped cleanly at the end."""
    web = subprocess.Popen(
        [".venv/bin/python", "manage.py", "serve", "--bind", "127.0.0.1:0",
         "--processes", "1", "--threads", "2"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        port = listening_port(Output(web.stdout), web)
        healthz(Browser(port), {200, 503}, web)  # Answering (a worker beat earlier, or none).
        yield port, web
    finally:
        assert stop(web) == 0


def proposed(port: int, token: str, goal: str) -> tuple[dict, dict]:
    """A new run of ``token``'s agent, and the transfer it proposes there."""
    _, session = api(port, token, "POST", "/sessions", {"title": goal})
    _, run = api(port, token, "POST", "/runs", {"session": session["id"], "goal": goal})
    _, operation = api(
        port, token, "POST", f"/runs/{run['id']}/operations",
        {"call_id": "call-1", "action": "ledger.transfer",
         "arguments": {"from": "A", "to": "B", "amount": "1.00"}, "risk": "medium",
         "rollback_kind": "compensating", "base_version": run["version"]},
    )  # fmt: skip
    return run, operation


def test_waiting_long_polls_hold_no_server_thread(deployment):
    """Two hundred agents wait on one process with two threads for requests: they are
    all let in and none holds a thread while it waits, a page answers meanwhile, and a
    change to what they wait on answers them at once."""
    token = issued(deployment, "demo", "waiting-agent")
    env = deployment | {"OVERSIGHT_API_MAX_WAITS_PER_TOKEN": str(WAITS)}
    with small_server(env) as (port, web):
        _, operation = proposed(port, token, "Wait")
        (worker,) = children(web.pid)
        idle = threads(worker)
        path = f"/operations/{operation['id']}?wait=30"
        with ThreadPoolExecutor(WAITS) as agents:
            waits = [agents.submit(api, port, token, "GET", path) for _ in range(WAITS)]
            # All of them in: each holds a slot of its token's cap and one of all.
            # Within their wait of 30 s.
            wait_until(lambda: flocks_held(worker) >= 2 * WAITS, 25, f"all {WAITS} waits in")
            # Each wait takes a thread for its first reads, then waits holding none:
            # the process keeps its threads for requests and a few of its own (one
            # watching the rows all the waits wait on, the event loop's few helpers).
            wait_until(lambda: threads(worker) <= idle + 8, 20, f"at most {idle + 8} threads")
            page, _ = Browser(port).request("GET", "/accounts/login/")
            assert page.status == 200
            withdrawn = time.monotonic()
            api(port, token, "POST", f"/operations/{operation['id']}/withdraw", {"reason": "x"})
            answers = [wait.result() for wait in waits]
        assert time.monotonic() - withdrawn < 10
        assert {(status, body["status"]) for status, body in answers} == {(200, "cancelled")}


def test_a_long_poll_on_the_event_loop_keeps_the_apis_boundaries(deployment):
    """The event loop serves a long-poll with only the security middleware before its
    view: it must still answer another project's agent, another token's, a bad token or
    none as the API does everywhere, and at once: nothing to wait for, nothing learnt."""
    elsewhere = manage_in(
        'shell -c "from runs.models import Project; '
        "Project.objects.get_or_create(slug='elsewhere', defaults={'name': 'Elsewhere'})\"",
        deployment,
    )
    assert elsewhere.returncode == 0, elsewhere.stderr
    mine = issued(deployment, "demo", "boundary-agent")
    neighbour = issued(deployment, "demo", "neighbour-agent")
    stranger = issued(deployment, "elsewhere", "stranger-agent")
    with small_server(deployment) as (port, _):
        run, operation = proposed(port, mine, "Boundaries")
        _, question = api(
            port, mine, "POST", f"/runs/{run['id']}/requests",
            {"prompt": "Which one?", "choices": ["a", "b"]},
        )  # fmt: skip
        for path in (f"/operations/{operation['id']}", f"/requests/{question['id']}"):
            for token in (neighbour, stranger):
                started = time.monotonic()
                status, body = api(port, token, "GET", f"{path}?wait={LONGEST_WAIT}")
                # A wait let in would have lasted its whole time: nothing changes.
                waited = time.monotonic() - started >= LONGEST_WAIT
                assert (status, waited) == (404, False), (path, body)
                assert "Which one?" not in json.dumps(body)
                assert "ledger.transfer" not in json.dumps(body)
            for token in ("", "ovs_not-a-token"):
                status, _ = api(port, token, "GET", f"{path}?wait=5")
                assert status == 401
        started = time.monotonic()
        status, body = api(port, mine, "GET", f"/requests/{question['id']}?wait=1")
        assert (status, body["id"]) == (200, question["id"])
        assert time.monotonic() - started >= 1  # Its own agent's wait does wait.
        status, body = api(port, stranger, "GET", "/events?wait=1")
        assert (status, body["events"]) == (200, [])  # Its own feed: nothing of the demo's.


STALLED = 6  # Request bodies that never arrive: three times the server's threads.


def post_head(port: int, path: str, token: str, *fields: str) -> socket.socket:
    """A connection that sent a POST's head through the TLS proxy, past every check that
    comes before its body (the page's CSRF origin and cookie, the API's token), with
    ``fields`` saying how its body comes (``Content-Length: N``, chunked); no body yet."""
    kind = "application/json" if path.startswith("/api/") else "application/x-www-form-urlencoded"
    head = [
        f"POST {path} HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "X-Forwarded-Proto: https",
        f"Origin: https://127.0.0.1:{port}",
        f"Cookie: csrftoken={'c' * 32}",
        f"Authorization: Bearer {token}",
        f"Content-Type: {kind}",
        *fields,
    ]
    sending = socket.create_connection(("127.0.0.1", port), timeout=30)
    sending.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
    return sending


def whole_answer(connection: socket.socket) -> str:
    """What the server sent on ``connection`` until it closed it."""
    with connection:
        return b"".join(iter(lambda: connection.recv(4096), b"")).decode("latin-1")


def test_stalled_request_bodies_hold_no_thread_and_are_refused_in_time(deployment):
    """Bodies are read on the event loop, within OVERSIGHT_WEB_BODY_SECONDS in all,
    before a request takes one of the threads: six that never arrive leave a server
    of two threads answering pages, and each is answered 408 when its time is up."""
    env = deployment | {"OVERSIGHT_WEB_BODY_SECONDS": "5"}
    token = issued(deployment, "demo", "stalling-agent")
    with small_server(env) as (port, _):
        paths = ["/accounts/login/", "/api/v1/sessions"] * (STALLED // 2)
        stalled = [post_head(port, path, token, "Content-Length: 100") for path in paths]
        started = time.monotonic()
        page, _ = Browser(port).request("GET", "/accounts/login/")
        assert page.status == 200
        assert time.monotonic() - started < 5  # Before any stalled body's time is up.
        answers = [whole_answer(connection) for connection in stalled]
    assert all(answer.startswith("HTTP/1.1 408 ") for answer in answers), answers
    assert "did not arrive within 5 seconds" in answers[0]
    assert '"error": "request_timeout"' in answers[1]  # The API's own shape.


def trickled(connection: socket.socket, every: float) -> str:
    """The answer to a body sent a byte every ``every`` seconds, each after waiting that
    long for the answer."""
    connection.settimeout(every)
    while True:
        try:
            first = connection.recv(4096)
            break
        except TimeoutError:
            connection.sendall(b"x")
    connection.settimeout(30)
    return first.decode("latin-1") + whole_answer(connection)


def test_a_body_has_its_time_in_all_not_per_piece(deployment):
    """A body that keeps coming within OVERSIGHT_WEB_BODY_SECONDS is read and answered,
    however slowly it comes; one trickling a byte every half second is answered 408
    when they are up, though no byte came later than half a second after the last."""
    env = deployment | {"OVERSIGHT_WEB_BODY_SECONDS": "6"}
    token = issued(deployment, "demo", "slow-agent")
    with small_server(env) as (port, _):
        body = json.dumps({"title": "Sent slowly"}).encode()
        steady = post_head(port, "/api/v1/sessions", token, f"Content-Length: {len(body)}")
        steady.sendall(body[:5])
        for piece in (body[5:10], body[10:15], body[15:]):
            time.sleep(0.5)  # simulates a slow target: here an agent on a slow link
            steady.sendall(piece)
        assert whole_answer(steady).startswith("HTTP/1.1 201 ")
        started = time.monotonic()  # Before the server's count of the body's time.
        answer = trickled(post_head(port, "/api/v1/sessions", token, "Content-Length: 100"), 0.5)
        waited = time.monotonic() - started
    assert answer.startswith("HTTP/1.1 408 "), answer
    assert 6 <= waited < 30  # 100 bytes at this pace would take 50 s.


def test_a_body_over_the_limit_is_refused_before_it_is_read_whole(deployment):
    """A body is read up to DATA_UPLOAD_MAX_MEMORY_SIZE (the API's limit and 1 KiB) and
    no further: one whose Content-Length says more is answered 413 before it is sent
    (a client asking whether to send it is told not to), and a chunked one, which says
    no length, is answered 413 once it is past the limit."""
    env = deployment | {"OVERSIGHT_API_MAX_BODY_BYTES": "1024"}
    most = 1024 + 1024
    token = issued(deployment, "demo", "large-agent")
    with small_server(env) as (port, _):
        declared = post_head(
            port, "/accounts/login/", token, f"Content-Length: {most + 1}", "Expect: 100-continue"
        )
        answer = whole_answer(declared)
        chunked = post_head(port, "/api/v1/sessions", token, "Transfer-Encoding: chunked")
        for _ in range(most // 1024 + 1):
            chunked.sendall(b"400\r\n" + b"x" * 1024 + b"\r\n")
        chunked_answer = whole_answer(chunked)
    assert answer.startswith("HTTP/1.1 413 "), answer
    assert f"over {most} bytes" in answer
    assert chunked_answer.startswith("HTTP/1.1 413 "), chunked_answer
    assert '"error": "limit_exceeded"' in chunked_answer  # The API's own, for its limit.


def exec_lines(unit: Path) -> list[list[str]]:
    return [
        shlex.split(line.split("=", 1)[1].lstrip("-").replace("/opt/oversight", str(ROOT)))
        for line in unit.read_text().splitlines()
        if line.startswith("ExecStart=")
    ]


@pytest.mark.parametrize("unit", sorted(UNITS.glob("*.service")), ids=lambda unit: unit.name)
def test_each_unit_runs_commands_and_options_that_exist(unit):
    lines = exec_lines(unit)
    assert lines
    for line in lines:
        if line[0].endswith("/bin/serve"):
            assert Path(line[0]).is_file()
            continue
        assert line[1] == "manage.py", line
        command = load_command_class(get_commands()[line[2]], line[2])
        args = [arg.replace("%H", "host").replace("%i", "1") for arg in line[3:]]
        command.create_parser("manage.py", line[2]).parse_args(args)  # exits on a bad option


@pytest.mark.skipif(
    subprocess.run(["which", "systemd-analyze"], capture_output=True).returncode,
    reason="systemd-analyze is not installed",
)
def test_systemd_finds_nothing_wrong_in_the_units(tmp_path):
    for unit in UNITS.iterdir():
        (tmp_path / unit.name).write_text(unit.read_text().replace("/opt/oversight", str(ROOT)))
    names = ["oversight-web.service", "oversight-worker@1.service", "oversight-daily.timer"]
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *(f"./{name}" for name in names)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert (done.returncode, done.stderr) == (0, "")
