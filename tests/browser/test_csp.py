"""Every main page runs under the Content Security Policy (no inline script or style, no
eval) without the browser refusing anything: htmx's polls and swaps included, the
sign-in and lockout pages, the admin site and the API's documentation."""

import pytest
from django.conf import settings
from playwright.sync_api import Page, expect

from runs.models import Checkpoint, Role
from tests.browser.conftest import sign_in
from tests.conftest import make_user

pytestmark = pytest.mark.django_db(transaction=True)


def refusals(page: Page) -> list[str]:
    """What the browser refuses under the policy, as chromium reports it on the console."""
    refused: list[str] = []
    page.on(
        "console",
        lambda message: (
            refused.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    return refused


def open_page(page: Page, url: str) -> None:
    response = page.goto(url)
    assert response.ok, (url, response.status)
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "style-src 'self'" in policy, policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy, policy


def is_poll(response) -> bool:
    return response.request.headers.get("hx-request") == "true"


@pytest.fixture
def boss(project):
    """Reviewer and admin of the project and superuser: every page is open to them."""
    user = make_user("boss", project, Role.REVIEWER, Role.ADMIN)
    user.is_staff = user.is_superuser = True
    user.save()
    return user


def test_main_pages_break_no_rule_of_the_policy(page, boss, project, run, propose):
    operation = propose()
    checkpoint = Checkpoint.objects.filter(run=run).last()
    refused = refusals(page)
    sign_in(page, boss)

    for url in [
        "/",
        "/runs/",
        f"/runs/{run.pk}/",
        "/audit/",
        f"/audit/checkpoints/{checkpoint.pk}/",
        "/alerts/",
        "/account/",
        "/accounts/password_change/",
        f"/projects/{project.slug}/tokens/",
        "/admin/",
        "/admin/runs/run/",
        "/api/v1/docs",
    ]:
        open_page(page, url)
        page.wait_for_load_state("networkidle")

    # Pages that poll, and a swap the person asks for: the swapped fragments obey too.
    for url in ["/approvals/", f"/operations/{operation.pk}/"]:
        with page.expect_response(is_poll):
            open_page(page, url)
    open_page(page, f"/audit/runs/{run.pk}/")
    with page.expect_response(is_poll):
        page.get_by_role("button", name="Verify").click()

    assert refused == []


def test_sign_in_and_lockout_pages_break_no_rule_of_the_policy(page, reviewer):
    refused = refusals(page)
    open_page(page, "/accounts/login/")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        page.get_by_label("Username").fill(reviewer.get_username())
        page.get_by_label("Password").fill("wrong")
        page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Sign-in paused")).to_be_visible()
    assert refused == []
