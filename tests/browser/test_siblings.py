"""Pending siblings are visible (#34 item 8): on a desktop and on a phone, an operation's
page shows the others waiting on the same account and what they would do together,
which neither says alone: two transfers that each fit overdraw the account together.
Each links to the other; axe-core checks the pages, light and dark."""

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import SCREENSHOTS, arrived, assert_accessible, sign_in

pytestmark = pytest.mark.django_db(transaction=True)

SIZES = [{"width": 1280, "height": 800}, {"width": 390, "height": 844}]
OVERDRAWN = re.compile(
    r"Together they would overdraw A, though each fits on its own: these 2 transfers, this "
    r"one included, draw 5,500\.00 from it, 500\.00 more than the 5,000\.00 it holds now\."
)


@pytest.fixture(params=SIZES, ids=["1280x800", "390x844"])
def size(request, page) -> dict:
    page.set_viewport_size(request.param)
    return request.param


def siblings(page: Page):
    return page.get_by_role("region", name="Also waiting on account A")


def test_each_transfer_shows_the_other_and_that_together_they_overdraw_the_account(
    page, size, reviewer, propose, accounts
):
    first = propose("pay-1", arguments={"from": "A", "to": "B", "amount": "3000.00"})
    second = propose("pay-2", arguments={"from": "A", "to": "B", "amount": "2500.00"})
    sign_in(page, reviewer)
    page.goto(f"/operations/{first.pk}/")

    # Alone, it fits; the card next to its preview says what the two would do.
    expect(page.locator(".preview")).to_contain_text("It could be made now.")
    card = siblings(page)
    expect(card.get_by_role("note")).to_contain_text(OVERDRAWN)
    other = card.get_by_role("link", name=re.compile(rf"Operation {second.pk}\b"))
    expect(other).to_contain_text("A → B: 2,500.00")
    expect(card).to_contain_text("proposed by test-agent in this run")
    assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")
    card.scroll_into_view_if_needed()
    assert_accessible(page)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    card.screenshot(path=str(SCREENSHOTS / f"siblings-{size['width']}.png"))

    other.click()

    arrived(page, re.compile(rf"/operations/{second.pk}/$"))
    card = siblings(page)
    expect(card.get_by_role("link", name=re.compile(rf"Operation {first.pk}\b"))).to_contain_text(
        "A → B: 3,000.00"
    )
    expect(card.get_by_role("note")).to_contain_text(OVERDRAWN)
    page.emulate_media(color_scheme="dark")
    assert_accessible(page)


def test_the_card_goes_once_the_other_is_decided(page, size, reviewer, propose, accounts):
    first = propose("pay-1", arguments={"from": "A", "to": "B", "amount": "3000.00"})
    second = propose("pay-2", arguments={"from": "A", "to": "B", "amount": "2500.00"})
    sign_in(page, reviewer)
    page.goto(f"/operations/{second.pk}/")
    expect(siblings(page)).to_be_visible()
    page.goto(f"/operations/{first.pk}/")

    bar = page.get_by_role("region", name=f"Decide on operation {first.pk}")
    bar.get_by_role("link", name="Reject").click()
    page.locator("#reject-form").get_by_label("Reason (required)").fill("Paid by hand.")
    page.locator("#reject-form").get_by_role("button", name="Reject").click()

    arrived(page, re.compile(rf"/operations/{second.pk}/$"))  # Next waiting.
    expect(page.locator(".preview")).to_contain_text("It could be made now.")
    expect(siblings(page)).to_have_count(0)
