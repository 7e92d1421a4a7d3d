"""Long-polls are capped per token and in all (#11): a wait beyond a cap is refused at
once with 429 and Retry-After, while the waits within it, and the reviewers' pages,
are answered. Real concurrent requests against the live server."""

import json
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from runs.api.watcher import WATCHER
from tests.api_helpers import PREFIX, Api, proposal
from tests.conftest import issued
from tests.processes import wait_until

pytest_plugins = ["tests.api_helpers"]
# Seconds each admitted wait lasts (nothing changes the operations meanwhile); what is
# answered "at once" is answered before that.
WAIT = 10
LONGEST_WAIT = 30  # OVERSIGHT_API_MAX_WAIT_SECONDS's default: what "at once" is short of.


def long_polls_waiting() -> int:
    """How many long-polls of this process (the live server's, the test client's) wait."""
    return len(WATCHER._waits)


def until_long_polls_wait(count: int) -> None:
    wait_until(lambda: long_polls_waiting() == count, message=f"{count} long-polls waiting")


@pytest.fixture(autouse=True)
def caps(settings, tmp_path):
    """Two waits per token, three in all; slot files of this test's own."""
    settings.VAR_DIR = tmp_path
    settings.OVERSIGHT_API_MAX_WAITS_PER_TOKEN = 2
    settings.OVERSIGHT_API_MAX_WAITS = 3


def pending(token: str) -> str:
    """The path of a proposed operation in a run of ``token``'s own session."""
    api = Api(token)
    session = api.post("/sessions", {"title": "Waits"}).json()["id"]
    run = api.post("/runs", {"session": session, "goal": "Wait"}).json()["id"]
    return f"/operations/{api.propose(run, proposal()).json()['id']}"


def get(url: str, headers: dict) -> tuple[int, dict, bytes, float]:
    """Status, headers, body and seconds taken of a real GET."""
    started = time.monotonic()
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        answer = error.code, dict(error.headers), error.read()
    return (*answer, time.monotonic() - started)


@pytest.fixture
def waits(live_server):
    """``waits([(token, path), ...])``: all those long-polls sent at once; their answers
    in the same order."""

    def send(polls: list[tuple[str, str]]) -> list[tuple[int, dict, bytes, float]]:
        def poll(token_path: tuple[str, str]):
            token, path = token_path
            url = f"{live_server.url}{PREFIX}{path}?wait={WAIT}"
            return get(url, {"Authorization": f"Bearer {token}"})

        with ThreadPoolExecutor(len(polls)) as pool:
            return list(pool.map(poll, polls))

    return send


def refused_at_once(answer) -> bool:
    status, headers, body, seconds = answer
    return (
        status == 429
        and headers["Retry-After"] == "5"
        and json.loads(body)["error"] == "too_many_waits"
        and json.loads(body)["field"] == "wait"
        and seconds < WAIT
    )


def test_a_wait_beyond_the_tokens_cap_gets_429_at_once(agent_token, waits):
    path = pending(agent_token.plain)

    answers = waits([(agent_token.plain, path)] * 3)

    assert sorted(status for status, *_ in answers) == [200, 200, 429]
    assert all(refused_at_once(a) for a in answers if a[0] == 429)
    assert all(seconds >= WAIT for status, *_, seconds in answers if status == 200)
    assert waits([(agent_token.plain, path)])[0][0] == 200  # Their slots are free again.


def test_waits_beyond_the_cap_in_all_get_429_and_a_reviewer_page_still_answers(
    settings, project, owner, agent_token, reviewer, client, live_server, waits
):
    """Two waits of one token and twenty of another: three are admitted in all."""
    second = issued(project, "second-agent", owner)
    polls = [(agent_token.plain, pending(agent_token.plain))] * 2
    polls += [(second.plain, pending(second.plain))] * 20
    client.force_login(reviewer)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    page = []

    def open_the_queue_while_they_wait() -> None:
        until_long_polls_wait(3)
        page.append(get(f"{live_server.url}/approvals/", {"Cookie": cookie}))
        page.append(long_polls_waiting())

    reader = threading.Thread(target=open_the_queue_while_they_wait)
    reader.start()
    answers = waits(polls)
    reader.join()

    statuses = [status for status, *_ in answers]
    assert (statuses.count(200), statuses.count(429)) == (3, len(polls) - 3)
    assert all(refused_at_once(a) for a in answers if a[0] == 429)
    (status, _, html, _), still_waiting = page
    assert (status, still_waiting) == (200, 3), "the page answered while the three waited"
    assert b"Approvals" in html
