"""Sign-in throttling that cannot be used to lock reviewers out: failures pause one
account from one address; past an allowance, tries from an address that has failed
recently are slowed (by address and by account), never locked; an address with no
recent failures is never held back. Every attempt here is a real POST of the sign-in
form; time passing is the failures' own timestamps moved back."""

from datetime import timedelta
from io import StringIO

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.core.management import call_command
from django.db.models import F, Max, Sum

from oversight.sign_in import free_failures, wait_before_trying
from tests.conftest import make_user
from tests.helpers import sign_in

LIMIT = settings.AXES_FAILURE_LIMIT
HOME = "/"
ALICE_IP = "198.51.100.7"
MALLORY_IP = "203.0.113.66"
OFFICE_IP = "192.0.2.200"
# Failures past an allowance that make a wait of a minute (2**6 s, at most 60): longer
# than any test takes between a failure and the try it slows, however loaded the machine.
FAR_BEYOND = 6


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
        client.logout()
        return True
    assert response.status_code == 429
    return False


def time_passes(seconds: float) -> None:
    """The failures on record happened ``seconds`` earlier than they did."""
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - timedelta(seconds=seconds))


def failures_counted() -> int:
    return AccessAttempt.objects.aggregate(n=Sum("failures_since_start"))["n"] or 0


def test_failures_pause_the_account_from_that_address_and_nowhere_else(client, alice, bob):
    fail(client, "alice", LIMIT - 1, MALLORY_IP)
    response = sign_in(client, "alice", "not-the-password", REMOTE_ADDR=MALLORY_IP)

    assert response.status_code == 429
    assert signed_in(client, "alice", MALLORY_IP) is False
    assert signed_in(client, "alice", ALICE_IP) is True  # Alice, at her desk.
    assert signed_in(client, "bob", MALLORY_IP) is True  # Mallory's colleague, beside him.


def test_the_pause_is_a_page_that_says_what_happened(client, alice):
    fail(client, "alice", LIMIT, MALLORY_IP)
    response = sign_in(client, "alice", "pw", REMOTE_ADDR=MALLORY_IP)

    assert response.status_code == 429
    page = response.content.decode()
    assert "<title>Sign-in paused · Oversight</title>" in page
    assert "<h1>Sign-in paused</h1>" in page
    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
    assert f"paused for {minutes} minutes" in page
    assert "even with the right password; from another address it is not" in page
    assert response["Retry-After"] == str(minutes * 60)


def test_an_office_behind_one_address_is_not_locked_out_by_its_typos(client, alice, bob):
    for n in range(free_failures()["ip_address"]):
        fail(client, f"colleague-{n}", 1, OFFICE_IP)

    assert signed_in(client, "alice", OFFICE_IP) is True
    assert signed_in(client, "bob", OFFICE_IP) is True


def test_an_address_guessing_many_accounts_is_slowed_not_locked(client, alice, bob):
    for n in range(free_failures()["ip_address"] + FAR_BEYOND):
        fail(client, f"guess-{n}", 1, MALLORY_IP)
    counted = failures_counted()

    slowed = sign_in(client, "bob", "pw", REMOTE_ADDR=MALLORY_IP)
    assert slowed.status_code == 429
    page = slowed.content.decode()
    assert "<h1>Sign-in slowed</h1>" in page
    assert 1 <= int(slowed["Retry-After"]) <= 60
    assert f"Try again in {slowed['Retry-After']} second" in page
    assert failures_counted() == counted  # A try refused before it was made is no failure.
    assert signed_in(client, "alice", ALICE_IP) is True  # Elsewhere, nothing waits.

    time_passes(60)
    assert signed_in(client, "bob", MALLORY_IP) is True


def test_an_account_guessed_from_many_addresses_is_slowed_there_not_for_its_owner(client, alice):
    addresses = [f"192.0.2.{n}" for n in range(free_failures()["username"] + FAR_BEYOND)]
    for address in addresses:  # One guess from each: no pair reaches the limit.
        fail(client, "alice", 1, address)

    assert signed_in(client, "alice", addresses[0]) is False
    assert signed_in(client, "alice", ALICE_IP) is True


def test_the_wait_doubles_with_each_failure_up_to_a_minute(client, alice):
    for n in range(free_failures()["ip_address"]):
        fail(client, f"guess-{n}", 1, MALLORY_IP)
    waits = []
    for n in range(7):
        fail(client, f"more-{n}", 1, MALLORY_IP)  # Counted: the last wait is over.
        last = AccessAttempt.objects.aggregate(last=Max("attempt_time"))["last"]
        waits.append(wait_before_trying("alice", MALLORY_IP, now=last).total_seconds())
        time_passes(waits[-1])

    assert waits == [2, 4, 8, 16, 32, 60, 60]
    assert signed_in(client, "alice", MALLORY_IP) is True


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

    assert signed_in(client, "alice", MALLORY_IP) is False


def test_the_owner_signing_in_forgives_no_guesses_made_elsewhere(client, alice):
    fail(client, "alice", LIMIT - 1, MALLORY_IP)
    assert signed_in(client, "alice", ALICE_IP) is True
    fail(client, "alice", 1, MALLORY_IP)

    assert signed_in(client, "alice", MALLORY_IP) is False


def test_behind_a_proxy_the_configured_header_names_the_client(client, settings, alice):
    settings.OVERSIGHT_CLIENT_IP_HEADER = "HTTP_X_FORWARDED_FOR"
    proxy = {"REMOTE_ADDR": "10.0.0.2"}
    for n in range(LIMIT):
        # The left-most address is the client's own claim; the proxy appends the real one.
        sign_in(client, "alice", "x", HTTP_X_FORWARDED_FOR=f"192.0.2.{n}, {MALLORY_IP}", **proxy)

    mallory = sign_in(client, "alice", "pw", HTTP_X_FORWARDED_FOR=MALLORY_IP, **proxy)
    alice_through_proxy = sign_in(client, "alice", "pw", HTTP_X_FORWARDED_FOR=ALICE_IP, **proxy)
    assert (mallory.status_code, alice_through_proxy.status_code) == (429, 302)


def test_an_admin_sees_the_failures_and_lifts_a_pause(client, alice):
    fail(client, "alice", LIMIT, MALLORY_IP)
    assert signed_in(client, "alice", MALLORY_IP) is False
    admin = make_user("root")
    admin.is_staff = admin.is_superuser = True
    admin.save()
    client.force_login(admin)

    listing = client.get("/admin/axes/accessattempt/")
    assert listing.status_code == 200
    assert "alice" in listing.content.decode() and MALLORY_IP in listing.content.decode()
    attempt = AccessAttempt.objects.get(username="alice", ip_address=MALLORY_IP)
    lifted = client.post(f"/admin/axes/accessattempt/{attempt.pk}/delete/", {"post": "yes"})
    assert lifted.status_code == 302
    client.logout()

    assert signed_in(client, "alice", MALLORY_IP) is True


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
    sign_in(client, "alice", "pw", REMOTE_ADDR=ALICE_IP)
    for _ in range(LIMIT):
        # The form again with its error; at the limit, the pause.
        assert change_password(client, "a-guess").status_code in (200, 429)

    assert change_password(client, "pw").status_code == 429
    alice.refresh_from_db()
    assert alice.check_password("pw")
    client.logout()
    assert signed_in(client, "alice", ALICE_IP) is False  # Paused from where it was guessed.
