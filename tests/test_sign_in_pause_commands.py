"""django-axes's commands, as docs/operating/security.md gives them to admins: "list and
lift pauses with manage.py axes_list_attempts, axes_reset_username USER and
axes_reset_ip IP". Run against Oversight's throttle (a pause per account and address,
and tries slowed by address; in the database); a lifted pause lets the right password in
again."""

from datetime import timedelta
from io import StringIO

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.core.management import call_command
from django.db.models import F

from oversight.sign_in import free_failures
from tests.conftest import make_user
from tests.helpers import sign_in

LIMIT = settings.AXES_FAILURE_LIMIT
ALICE_IP = "198.51.100.7"
MALLORY_IP = "203.0.113.66"


@pytest.fixture
def alice(db):
    return make_user("alice")


def command(*args: str) -> list[str]:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().splitlines()


def paused(client, username: str, ip: str) -> bool:
    """Whether the right password ("pw") is refused for ``username`` from ``ip``
    (paused, or slowed)."""
    response = sign_in(client, username, "pw", REMOTE_ADDR=ip)
    client.logout()
    assert response.status_code in (302, 429)
    return response.status_code == 429


def guess(client, username: str, ip: str) -> None:
    assert sign_in(client, username, "a-guess", REMOTE_ADDR=ip).status_code in (200, 429)


def test_axes_list_attempts_lists_each_paused_account_and_address(client, alice):
    for _ in range(LIMIT):
        guess(client, "alice", MALLORY_IP)

    assert command("axes_list_attempts") == [f"{MALLORY_IP}\talice\t{LIMIT}"]


def test_axes_reset_username_lifts_an_accounts_pause(client, alice):
    for _ in range(LIMIT):
        guess(client, "alice", MALLORY_IP)
    assert paused(client, "alice", MALLORY_IP)

    assert command("axes_reset_username", "alice") == ["1 attempts removed."]

    assert command("axes_list_attempts") == []
    assert not paused(client, "alice", MALLORY_IP)


def test_axes_reset_ip_lifts_an_addresss_slowing(client, alice):
    """One address guessed at many accounts: tries from it are slowed, even alice's
    right password, until the wait is over or its attempts are reset."""
    free = free_failures()["ip_address"]
    guesses = free + 6  # The last one sets a wait of a minute: it cannot pass first.
    for n in range(guesses):
        if n > free:  # The wait the last guess set has passed.
            AccessAttempt.objects.update(attempt_time=F("attempt_time") - timedelta(minutes=1))
        guess(client, f"guess-{n}", MALLORY_IP)
    assert paused(client, "alice", MALLORY_IP)

    assert command("axes_reset_ip", MALLORY_IP) == [f"{guesses} attempts removed."]

    assert command("axes_list_attempts") == []
    assert not paused(client, "alice", MALLORY_IP)
