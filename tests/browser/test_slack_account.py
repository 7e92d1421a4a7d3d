"""A reviewer links their Slack user from their account page, on a desktop (1280 by
800) and a phone (390 by 844), with no axe-core violation: Get a code shows a code
once, focused for copying; once linked, the page names the Slack user and unlinks it."""

import pytest
from playwright.sync_api import expect

from runs.models import SlackIdentity
from tests.browser.conftest import assert_accessible, screenshot, sign_in
from tests.fake_slack import BOT_TOKEN, SIGNING_SECRET, TEAM

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("size", [(1280, 800), (390, 844)], ids=["desktop", "phone"])
def test_a_reviewer_gets_a_code_and_later_unlinks_their_slack_user(page, reviewer, settings, size):
    settings.OVERSIGHT_SLACK_BOT_TOKEN = BOT_TOKEN
    settings.OVERSIGHT_SLACK_SIGNING_SECRET = SIGNING_SECRET
    page.set_viewport_size({"width": size[0], "height": size[1]})
    sign_in(page, reviewer)
    page.goto("/account/")
    assert_accessible(page)

    page.get_by_role("button", name="Get a code").click()

    expect(page.get_by_role("heading", name="Type this code in Slack")).to_be_visible()
    expect(page.locator("#new-token")).to_be_focused()
    assert len(page.locator("#new-token").input_value()) == 10
    assert page.evaluate("document.documentElement.scrollWidth - innerWidth") <= 0
    assert_accessible(page)
    screenshot(page, f"slack-code-{size[0]}")
    SlackIdentity.objects.create(user=reviewer, team=TEAM, slack_user="U0REVIEWER")
    page.goto("/account/")
    expect(page.locator("#slack-identity + p")).to_contain_text("U0REVIEWER")
    page.get_by_role("button", name="Unlink").click()
    expect(page.get_by_text("Your Slack user is unlinked")).to_be_visible()
    assert not SlackIdentity.objects.exists()
