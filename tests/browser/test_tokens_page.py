"""The agent tokens page on a desktop (1280 by 800) and a phone (390 by 844), with no
axe-core violation: a new token has the focus, selected, so that a keyboard user copies
it at once, and a Copy button that says so; Revoke asks first (a disclosure holding the
form: no script needed) and revokes only once confirmed; every aria-describedby names
an element of the page; and the page never scrolls sideways."""

import pytest
from playwright.sync_api import Page, expect

from runs.models import AgentToken
from tests.browser.conftest import sign_in
from tests.conftest import issued

pytestmark = pytest.mark.django_db(transaction=True)
SIZES = [{"width": 1280, "height": 800}, {"width": 390, "height": 844}]
# "field -> id" for each id an aria-describedby names that the page does not have.
MISSING_DESCRIPTIONS = """() => Array.from(document.querySelectorAll("[aria-describedby]"))
  .flatMap(e => e.getAttribute("aria-describedby").split(/\\s+/)
    .filter(id => !document.getElementById(id)).map(id => `${e.id} -> ${id}`))"""


def tokens_page(page: Page, admin_user, project, size: dict) -> None:
    page.set_viewport_size(size)
    sign_in(page, admin_user)
    page.goto(f"/projects/{project.slug}/tokens/")


def fits(page: Page) -> None:
    """Nothing widens the page: the table scrolls in its own region."""
    wide = page.evaluate("document.documentElement.scrollWidth - innerWidth")
    assert wide <= 0, f"the page scrolls {wide} px sideways"


def clipboard(page: Page) -> str:
    return page.evaluate("navigator.clipboard.readText()")


@pytest.mark.parametrize("size", SIZES, ids=["desktop", "phone"])
def test_a_new_token_has_the_focus_and_a_copy_button(page, admin_user, project, size):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    tokens_page(page, admin_user, project, size)
    page.get_by_label("Name").fill("planner")
    page.get_by_role("button", name="Create token").click()

    token = page.get_by_role("textbox", name="New token")
    expect(token).to_be_focused()
    fits(page)
    plain = token.input_value()
    assert AgentToken.authenticate(plain).name == "planner"
    page.keyboard.press("Control+C")  # selected with the focus: copied as it is
    assert clipboard(page) == plain

    page.evaluate("navigator.clipboard.writeText('')")
    page.get_by_role("button", name="Copy").click()
    expect(page.locator("#copy-status")).to_have_text("Copied")
    expect(page.locator("#copy-status")).to_have_attribute("role", "status")
    assert clipboard(page) == plain

    page.reload()  # shown once: the page asked again has no secret
    expect(page.get_by_role("textbox", name="New token")).to_have_count(0)
    expect(page.locator("main")).not_to_contain_text(plain)


@pytest.mark.parametrize("size", SIZES, ids=["desktop", "phone"])
def test_revoke_asks_first_and_works_from_the_keyboard(page, admin_user, project, owner, size):
    token = issued(project, "planner", owner)
    issued(project, "other", owner)
    tokens_page(page, admin_user, project, size)
    row = page.get_by_role("row").filter(has_text="planner")
    confirm = row.get_by_role("button", name="Revoke planner", exact=True)
    expect(confirm).to_be_hidden()

    row.get_by_text("Revoke planner…").focus()  # the disclosure's summary
    page.keyboard.press("Enter")  # opens the question; revokes nothing
    expect(row).to_contain_text("Its agent gets 401 from its next request")
    expect(confirm).to_be_visible()
    fits(page)
    token.refresh_from_db()
    assert token.revoked_at is None

    page.keyboard.press("Tab")
    expect(confirm).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator(".messages")).to_contain_text("Token planner is revoked")
    expect(page.get_by_role("row").filter(has_text="planner")).to_contain_text("Revoked")
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert AgentToken.objects.get(name="other").revoked_at is None


@pytest.mark.parametrize("size", SIZES, ids=["desktop", "phone"])
def test_without_javascript_the_token_has_the_focus_and_revoke_still_asks(
    browser, live_server, admin_user, project, size
):
    context = browser.new_context(
        base_url=live_server.url, viewport=size, java_script_enabled=False
    )
    page = context.new_page()
    sign_in(page, admin_user)
    page.goto(f"/projects/{project.slug}/tokens/")
    page.get_by_label("Name").fill("planner")
    page.get_by_role("button", name="Create token").click()
    expect(page.get_by_role("textbox", name="New token")).to_be_focused()
    expect(page.get_by_role("button", name="Copy")).to_be_hidden()  # it needs a script

    row = page.get_by_role("row").filter(has_text="planner")
    row.get_by_text("Revoke planner…").click()
    row.get_by_role("button", name="Revoke planner", exact=True).click()
    expect(page.locator(".messages")).to_contain_text("Token planner is revoked")
    assert AgentToken.objects.get(name="planner").revoked_at is not None
    context.close()


@pytest.mark.parametrize("size", SIZES, ids=["desktop", "phone"])
def test_every_description_a_field_points_at_is_there(page, admin_user, project, size):
    tokens_page(page, admin_user, project, size)
    assert page.evaluate(MISSING_DESCRIPTIONS) == []
    expect(page.get_by_label("Name")).to_have_accessible_description(
        "For example the agent's name."
    )

    for _ in range(2):  # the second one with a name already taken
        page.get_by_label("Name").fill("planner")
        page.get_by_role("button", name="Create token").click()
    expect(page.get_by_role("alert")).to_contain_text("already has a token named")
    assert page.evaluate(MISSING_DESCRIPTIONS) == []
    name = page.get_by_label("Name")
    expect(name).to_have_attribute("aria-invalid", "true")
    expect(name).to_have_accessible_description(
        "For example the agent's name. acme already has a token named 'planner'"
    )
