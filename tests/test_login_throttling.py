"""Sign-in throttling: failed sign-ins are counted per account and per client address;
at the limit the sign-in page refuses (a page that says so), even the right password,
until the cool-off has passed. Every attempt here is a real POST of the sign-in form."""

from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command

from tests.conftest import make_user
from tests.helpers import sign_in

LIMIT = settings.AXES_FAILURE_LIMIT
HOME = "/"
ALICE_IP = "198.51.100.7"
MALLORY_IP = "203.0.113.66"


@pytest.fixture
def alice(db):
    return make_user("alice")


@pytest.fixture
def bob(db):
    return make_user("bob")


def fail(client, username: str, times: int, ip: str) -> None:
    for _ in range(times):
        response = sign_in(client, username, "not-the-password", REMOTE_ADDR=ip)
        assert response.status_code in (200, 429)


def signed_in(client, username: str, ip: str) -> bool:
    response = sign_in(client, username, "pw", REMOTE_ADDR=ip)
    if response.status_code == 302:
        assert response["Location"] == HOME
        return True
    assert response.status_code == 429
    return False


def test_the_limit_of_failures_locks_the_account_even_from_elsewhere(client, alice):
    fail(client, "alice", LIMIT - 1, MALLORY_IP)
    response = sign_in(client, "alice", "not-the-password", REMOTE_ADDR=MALLORY_IP)

    assert response.status_code == 429
    assert signed_in(client, "alice", MALLORY_IP) is False
    assert signed_in(client, "alice", ALICE_IP) is False
    assert client.get(HOME).status_code == 302  # Still not signed in.


def test_the_lockout_is_a_page_that_says_what_happened(client, alice):
    fail(client, "alice", LIMIT, MALLORY_IP)
    response = sign_in(client, "alice", "pw", REMOTE_ADDR=ALICE_IP)

    assert response.status_code == 429
    page = response.content.decode()
    assert "<title>Sign-in paused · Oversight</title>" in page
    assert "<h1>Sign-in paused</h1>" in page
    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
    assert f"paused for {minutes} minutes" in page
    assert "even with the right password" in page


def test_one_address_trying_many_accounts_is_stopped(client, alice, bob):
    for n in range(LIMIT):
        fail(client, f"guess-{n}", 1, MALLORY_IP)

    assert signed_in(client, "bob", MALLORY_IP) is False
    assert signed_in(client, "alice", ALICE_IP) is True  # Other addresses are not paused.


def test_a_success_starts_the_count_again(client, alice):
    fail(client, "alice", LIMIT - 1, ALICE_IP)
    assert signed_in(client, "alice", ALICE_IP) is True
    fail(client, "alice", LIMIT - 1, ALICE_IP)
    assert signed_in(client, "alice", ALICE_IP) is True
    fail(client, "alice", LIMIT, ALICE_IP)

    assert signed_in(client, "alice", ALICE_IP) is False


def test_a_success_on_ones_own_account_forgives_no_guesses_at_another(client, alice, bob):
    # Mallory holds bob's password and guesses alice's from the same address.
    fail(client, "alice", LIMIT - 1, MALLORY_IP)
    assert signed_in(client, "bob", MALLORY_IP) is True
    fail(client, "alice", 1, MALLORY_IP)

    assert signed_in(client, "alice", ALICE_IP) is False


def test_behind_a_proxy_the_configured_header_names_the_client(client, settings, alice):
    settings.OVERSIGHT_CLIENT_IP_HEADER = "HTTP_X_FORWARDED_FOR"
    proxy = {"REMOTE_ADDR": "10.0.0.2"}
    for n in range(LIMIT):
        # The left-most address is the client's own claim; the proxy appends the real one.
        sign_in(
            client, f"guess-{n}", "x", HTTP_X_FORWARDED_FOR=f"192.0.2.{n}, {MALLORY_IP}", **proxy
        )

    mallory = sign_in(client, "alice", "pw", HTTP_X_FORWARDED_FOR=MALLORY_IP, **proxy)
    alice_through_proxy = sign_in(client, "alice", "pw", HTTP_X_FORWARDED_FOR=ALICE_IP, **proxy)
    assert (mallory.status_code, alice_through_proxy.status_code) == (429, 302)


def test_the_demo_users_sign_in_one_after_another_from_one_machine(db, monkeypatch, client):
    monkeypatch.setenv("OVERSIGHT_DEMO_PASSWORD", "demo-password-for-tests")
    call_command("seed_demo", stdout=StringIO())
    fail(client, "reviewer", 1, "127.0.0.1")  # A typo on the way.

    for username in ["reviewer", "reviewer2", "auditor", "admin"]:
        response = sign_in(client, username, "demo-password-for-tests")
        assert (response.status_code, response["Location"]) == (302, HOME), username
        assert client.get(HOME).status_code == 200


@pytest.mark.parametrize(
    "url",
    ["/accounts/password_reset/", "/accounts/reset/MQ/set-password/", "/accounts/reset/done/"],
)
def test_there_is_no_password_reset_by_email(client, url):
    assert client.get(url).status_code == 404


def change_password(client, old_password: str):
    new = "N3w-pass-w0rd!"
    form = {"old_password": old_password, "new_password1": new, "new_password2": new}
    return client.post("/accounts/password_change/", form, REMOTE_ADDR=ALICE_IP)


def test_guessing_the_current_password_on_the_change_page_is_throttled_too(client, alice):
    """A session left open must not let someone guess the password without limit."""
    assert signed_in(client, "alice", ALICE_IP)
    for _ in range(LIMIT):
        # The form again with its error; at the limit, the pause.
        assert change_password(client, "a-guess").status_code in (200, 429)

    assert change_password(client, "pw").status_code == 429
    alice.refresh_from_db()
    assert alice.check_password("pw")
    client.logout()
    assert signed_in(client, "alice", MALLORY_IP) is False  # The account is paused.
