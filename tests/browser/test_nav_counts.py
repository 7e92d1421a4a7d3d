"""The navigation's counts as a screen reader says them (#34): "Approvals, 1 waiting",
"Alerts, 0 open", with the badge showing the bare number, on a full page and after
the queue's live refresh has replaced the count."""

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import sign_in

pytestmark = pytest.mark.django_db(transaction=True)

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}


def spoken_name(page: Page, selector: str) -> str:
    """The accessible name chromium gives assistive technology for the element at
    ``selector`` (its own computation, not Playwright's), as speech reads it: chromium
    puts a space before a visually hidden (absolutely positioned) comma, which speech
    and the brief's "Approvals, 1 waiting" do not have."""
    session = page.context.new_cdp_session(page)
    root = session.send("DOM.getDocument")["root"]["nodeId"]
    node = session.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
    tree = session.send("Accessibility.getPartialAXTree", {"nodeId": node})
    name = next(entry for entry in tree["nodes"] if not entry.get("ignored"))["name"]["value"]
    return re.sub(r"\s+,", ",", name)


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_each_count_is_said_with_its_words_and_shown_bare(page, reviewer, propose, viewport):
    page.set_viewport_size(viewport)
    propose()
    sign_in(page, reviewer)
    page.goto("/runs/")

    assert spoken_name(page, "#nav-approvals") == "Approvals, 1 waiting"
    assert spoken_name(page, "header.top nav a[href='/alerts/']") == "Alerts, 0 open"
    expect(page.locator("#nav-pending")).to_have_text("1")
    expect(page.locator("#nav-alerts")).to_have_text("0")
    expect(page.locator("header.top nav [aria-label]")).to_have_count(0)


def test_the_count_keeps_its_words_through_the_queues_live_refresh(page, reviewer, propose):
    sign_in(page, reviewer)
    page.goto("/approvals/")
    expect(page.locator("#nav-pending")).to_have_text("0")

    propose()

    expect(page.locator("#nav-pending")).to_have_text("1")
    assert spoken_name(page, "#nav-approvals") == "Approvals, 1 waiting"
    expect(page.locator("header.top nav [aria-label]")).to_have_count(0)
