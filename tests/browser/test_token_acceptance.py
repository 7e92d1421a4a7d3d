"""A token issued to act for another member waits for them, on a desktop (1280 by 800)
and a phone (390 by 844), with no axe-core violation on any page of the way: the admin
who issues it reads that it waits and for whom; the member finds it on their account
page, reads who issued it and what accepting means, and accepts it (or declines it)
from the keyboard; the page never scrolls sideways."""

import pytest
from playwright.sync_api import Page, expect

from runs.models import AgentToken, Role
from tests.browser.conftest import assert_accessible, sign_in
from tests.conftest import make_user

pytestmark = pytest.mark.django_db(transaction=True)
SIZES = [{"width": 1280, "height": 800}, {"width": 390, "height": 844}]


@pytest.fixture
def boss(project):
    """An admin who also reviews: the one who issues the token."""
    return make_user("boss", project, Role.REVIEWER, Role.ADMIN)


def fits(page: Page) -> None:
    wide = page.evaluate("document.documentElement.scrollWidth - innerWidth")
    assert wide <= 0, f"{page.url} scrolls {wide} px sideways"


def issue_for(page: Page, boss, project, owner: str) -> None:
    """``boss`` issues a token that acts for ``owner`` on the tokens page, signs out."""
    sign_in(page, boss)
    page.goto(f"/projects/{project.slug}/tokens/")
    page.get_by_label("Name").fill("side-agent")
    page.get_by_label("Acts for").select_option(owner)
    page.get_by_role("button", name="Create token").click()
    expect(page.locator("#new-token-help")).to_contain_text(
        f"It acts once {owner} accepts it on their account page"
    )
    row = page.get_by_role("row").filter(has_text="side-agent")
    expect(row).to_contain_text("boss")  # issued by
    expect(row).to_contain_text(f"Waits for {owner}")
    assert_accessible(page)
    fits(page)
    page.get_by_role("button", name="Sign out").click()


@pytest.mark.parametrize("size", SIZES, ids=["desktop", "phone"])
def test_the_member_accepts_from_their_account_page(page, boss, reviewer2, project, size):
    page.set_viewport_size(size)
    issue_for(page, boss, project, "reviewer2")
    sign_in(page, reviewer2)

    page.goto("/account/")
    section = page.get_by_role("region", name="Agent tokens that would act for you")
    expect(section).to_contain_text("side-agent in Acme, issued by boss")
    assert_accessible(page)
    fits(page)
    section.get_by_role("link", name="side-agent").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Agent token side-agent")
    expect(page.locator("main")).to_contain_text("neither you nor boss may decide")
    assert_accessible(page)
    fits(page)

    page.get_by_role("button", name="Accept").focus()
    page.keyboard.press("Enter")
    expect(page.locator(".messages")).to_contain_text("Token side-agent acts for you from now on")
    expect(page.get_by_role("region", name="Agent tokens that would act for you")).to_have_count(0)
    assert not AgentToken.objects.get(name="side-agent").waits


@pytest.mark.parametrize("size", SIZES, ids=["desktop", "phone"])
def test_the_member_declines_and_it_is_revoked(page, boss, reviewer2, project, size):
    page.set_viewport_size(size)
    issue_for(page, boss, project, "reviewer2")
    sign_in(page, reviewer2)
    token = AgentToken.objects.get(name="side-agent")

    page.goto(f"/account/tokens/{token.pk}/")
    page.get_by_role("button", name="Decline").click()

    expect(page.locator(".messages")).to_contain_text("Token side-agent is declined")
    token.refresh_from_db()
    assert token.revoked_at is not None and token.accepted_at is None
    page.goto(f"/account/tokens/{token.pk}/")  # what it says afterwards
    expect(page.locator("main")).to_contain_text("It is revoked: it never acts again.")
    expect(page.get_by_role("button", name="Accept")).to_have_count(0)
    fits(page)
