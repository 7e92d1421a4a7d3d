"""A token revoked, or whose owner leaves the project, while its long-polls wait: each
wait ends at once with the 401 that any request of that token now gets, instead of
answering for up to 30 s more (#35 item 5). Real long-polls against the live server."""

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.api_helpers import PREFIX, Api
from tests.conftest import issued
from tests.test_api_waits import WAIT, get, pending, until_long_polls_wait

pytest_plugins = ["tests.api_helpers"]


@pytest.fixture(autouse=True)
def slots(settings, tmp_path):
    settings.VAR_DIR = tmp_path


def waiting_then(live_server, token, path: str, act) -> tuple[int, dict, float]:
    """A long-poll of ``path`` with ``token``; ``act()`` once it waits. Its status,
    body and seconds."""
    url = f"{live_server.url}{PREFIX}{path}{'&' if '?' in path else '?'}wait={WAIT}"
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(get, url, {"Authorization": f"Bearer {token.plain}"})
        until_long_polls_wait(1)
        act()
        status, _, body, seconds = answer.result()
    return status, json.loads(body), seconds


@pytest.mark.parametrize("path", ["operation", "events"])
def test_revoking_a_token_ends_its_waits_with_401(live_server, agent_token, path):
    waited = pending(agent_token.plain)
    if path == "events":  # Past what the token's feed holds: it waits for what comes next.
        waited = f"/events?after={Api(agent_token.plain).get('/events').json()['cursor']}"

    status, body, seconds = waiting_then(live_server, agent_token, waited, agent_token.revoke)

    assert (status, body["error"]) == (401, "unauthenticated")
    assert "revoked" in body["detail"]
    assert seconds < WAIT


def test_the_owner_leaving_the_project_ends_the_tokens_waits(
    live_server, project, owner, agent_token
):
    waited = pending(agent_token.plain)

    def leaves() -> None:
        project.memberships.filter(user=owner).delete()

    status, body, seconds = waiting_then(live_server, agent_token, waited, leaves)

    assert (status, body["error"]) == (401, "unauthenticated")
    assert seconds < WAIT


def test_another_tokens_revocation_leaves_a_wait_waiting(live_server, project, owner, agent_token):
    other = issued(project, "other-agent", owner)
    waited = pending(agent_token.plain)

    status, _, seconds = waiting_then(live_server, agent_token, waited, other.revoke)

    assert status == 200
    assert seconds >= WAIT
