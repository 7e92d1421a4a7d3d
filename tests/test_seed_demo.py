"""``manage.py seed_demo``: the demo users can log in, the password is shown once, and
running it again changes nothing."""

import re
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from runs.models import Membership, Run
from tests.helpers import sign_in

PASSWORD = "demo-password-for-tests"
DEMO_ROLES = {
    "reviewer": "reviewer",
    "reviewer2": "reviewer",
    "auditor": "auditor",
    "admin": "admin",
}
User = get_user_model()


@pytest.fixture(autouse=True)
def artifact_root(settings, tmp_path):
    settings.OVERSIGHT_ARTIFACT_ROOT = tmp_path


@pytest.fixture
def with_password(monkeypatch):
    monkeypatch.setenv("OVERSIGHT_DEMO_PASSWORD", PASSWORD)


@pytest.fixture
def without_password(monkeypatch):
    monkeypatch.delenv("OVERSIGHT_DEMO_PASSWORD", raising=False)


def seed() -> str:
    out = StringIO()
    call_command("seed_demo", stdout=out)
    return out.getvalue()


def password_hashes() -> dict[str, str]:
    return dict(User.objects.filter(username__in=DEMO_ROLES).values_list("username", "password"))


def test_demo_users_are_members_of_the_demo_project(db, with_password):
    seed()
    memberships = Membership.objects.filter(project__slug="demo")
    # The person the demo agent acts for is a member too (a token acts only for
    # members), reading only; they have no password.
    expected = {*DEMO_ROLES.items(), ("agent-owner", "auditor")}
    assert {(m.user.username, m.role.name) for m in memberships} == expected
    assert not User.objects.get(username="agent-owner").has_usable_password()


def test_demo_users_log_in_with_the_password_from_the_environment(db, with_password, client):
    seed()
    for username in DEMO_ROLES:
        assert sign_in(client, username, PASSWORD).status_code == 302, username


def test_a_generated_password_is_printed_once_and_kept(db, without_password, client):
    password = re.search(r"^password: (\S+)$", seed(), re.MULTILINE).group(1)
    hashes = password_hashes()
    second = seed()
    assert "unchanged" in second
    assert password not in second
    assert password_hashes() == hashes
    assert sign_in(client, "reviewer", password).status_code == 302


def test_seeding_twice_creates_nothing_new(db, with_password):
    seed()
    counts = Run.objects.count(), Membership.objects.count(), User.objects.count()
    seed()
    assert (Run.objects.count(), Membership.objects.count(), User.objects.count()) == counts


def test_demo_runs_show_at_least_five_statuses_including_waiting(db, with_password):
    seed()
    statuses = set(Run.objects.values_list("status", flat=True))
    assert len(statuses) >= 5
    assert Run.Status.WAITING in statuses
