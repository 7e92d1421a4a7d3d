"""A person signs in through the OpenID provider in a real browser, and out of both."""

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import arrived, screenshot
from tests.identity_provider import PASSWORD

pytest_plugins = ["tests.identity_provider"]
pytestmark = pytest.mark.django_db(transaction=True)


def test_a_reviewer_signs_in_through_the_provider_and_out_of_both(page, sso, live_server):
    sso.set_user("dana", PASSWORD, email="dana@example.com", groups=["payments-reviewers"])
    page.goto("/approvals/")
    screenshot(page, "sign-in-with-single-sign-on")

    page.get_by_role("link", name="Sign in with Example Corp").click()
    # The provider's own page asks who this is.
    page.get_by_label("Username").fill("dana")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()

    # Back in Oversight where they were going, signed in, a reviewer of Acme.
    expect(page.get_by_role("heading", name="Approvals")).to_be_visible()
    assert page.url.startswith(f"{live_server.url}/approvals/")
    expect(page.locator(".who")).to_contain_text("dana")

    page.get_by_role("button", name="Sign out").click()

    # Out of Oversight, then of the provider, which sends the browser back here.
    arrived(page, f"{live_server.url}/accounts/login/")
    page.get_by_role("link", name="Sign in with Example Corp").click()
    expect(page.get_by_label("Password")).to_be_visible()  # the provider asks again
    assert page.url.startswith(sso.base_url)
