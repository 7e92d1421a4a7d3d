"""The feed's follower every framework's resumer shares (``ovs.poll``/``ovs.follow``),
against a live server: an error that says Oversight is out of reach, however a
framework wrapped it, hands the event back to be handled again; a subject's own error
sets it aside and the feed goes on; an async handle given to the sync client is the
caller's mistake, and consumes nothing."""

import pytest

from oversight_client import Follower, Oversight, Unreachable
from oversight_client.steps import WrongClient
from tests.client_helpers import client_for

pytest_plugins = ["tests.client_helpers"]


@pytest.fixture
def fed(ovs: Oversight) -> int:
    """A run whose creation is on the token's feed."""
    session = ovs.open_session(title="Feed")
    return ovs.start_run(session["id"], goal="Be followed")["id"]


def away() -> Unreachable:
    return Unreachable(None, "unreachable", "Oversight is out of reach")


def test_an_out_of_reach_error_wrapped_by_a_framework_hands_the_event_back(ovs, fed):
    seen = []

    def handle(event: dict) -> bool:
        seen.append(event["seq"])
        if len(seen) == 1:
            try:
                raise away()
            except Unreachable as error:
                raise RuntimeError("the framework's own error") from error
        return True

    follower = Follower(handle, lambda event: event["run"])
    with pytest.raises(Unreachable):
        ovs.poll(follower)
    assert (follower.after, follower.failed) == (0, {})
    assert ovs.poll(follower) >= 1
    assert seen[0] == seen[1]  # the same event, handled again
    assert follower.failed == {}


def test_a_subject_s_own_error_sets_it_aside_and_the_feed_goes_on(ovs, fed, tmp_path):
    from oversight_client.cursor import FileCursor

    def handle(event: dict) -> bool:
        raise ValueError("this run is broken")

    cursor = FileCursor(tmp_path / "cursor")
    follower = Follower(handle, lambda event: event["run"], cursor)
    assert ovs.poll(follower) == 0
    assert follower.failed == {fed: "ValueError: this run is broken"}
    assert cursor.load() == follower.after > 0


def test_an_async_handle_given_to_the_sync_client_consumes_nothing(live_server, client_token, fed):
    async def handle(event: dict) -> bool:
        return True

    ovs = client_for(live_server, client_token, Oversight)
    follower = Follower(handle, lambda event: event["run"])
    with pytest.raises(WrongClient, match="is async: use AsyncOversight"):
        ovs.poll(follower)
    assert (follower.after, follower.failed) == (0, {})
