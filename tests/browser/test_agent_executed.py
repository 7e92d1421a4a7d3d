"""An operation the agent carries out itself is told apart at sight (#35 item 9): its
row in the queue says so in words, and its page says, in the first screen under the
action's name, that Oversight neither runs, verifies nor rolls it back. At 1280x800 and
390x844, light and dark, with axe-core finding nothing."""

import pytest
from playwright.sync_api import Page, expect

from runs.models import Operation
from tests.browser.conftest import SCREENSHOTS, assert_accessible, sign_in

pytestmark = pytest.mark.django_db(transaction=True)

SIZES = [{"width": 1280, "height": 800}, {"width": 390, "height": 844}]
TAG = "Carried out by the agent itself"
NOTICE = "Carried out by the agent itself, not by Oversight"


@pytest.fixture(params=SIZES, ids=["1280x800", "390x844"])
def size(request, page) -> dict:
    page.set_viewport_size(request.param)
    return request.param


@pytest.fixture
def agents_own(propose) -> Operation:
    return propose(
        "crm-1",
        action="crm.update",
        arguments={"id": 7, "stage": "won"},
        rollback_kind=Operation.RollbackKind.NONE,
        summary="Mark the deal as won",
    )


def fits_the_width(page: Page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= innerWidth")


def check_and_keep(page: Page, name: str) -> None:
    """axe-core finds nothing, light and dark; the page is kept as a screenshot."""
    assert_accessible(page)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
    page.emulate_media(color_scheme="dark")
    assert_accessible(page)
    page.screenshot(path=str(SCREENSHOTS / f"{name}-dark.png"), full_page=True)
    page.emulate_media(color_scheme="light")


def test_the_queue_row_says_who_carries_it_out(page, size, reviewer, propose, agents_own):
    transfer = propose("pay-1")
    sign_in(page, reviewer)
    page.goto("/approvals/")

    expect(page.locator(f"#op-{agents_own.pk}").get_by_text(TAG)).to_be_visible()
    expect(page.locator(f"#op-{transfer.pk}")).not_to_contain_text(TAG)
    assert fits_the_width(page)
    check_and_keep(page, f"agent-executed-queue-{size['width']}")


def test_its_page_says_so_in_the_first_screen(page, size, reviewer, propose, agents_own):
    sign_in(page, reviewer)
    page.goto(f"/operations/{agents_own.pk}/")

    notice = page.get_by_role("region", name=NOTICE)
    expect(notice).to_contain_text("crm.update is not one of Oversight's actions")
    expect(notice).to_contain_text("it only records what the agent reports")
    # Seen without scrolling, clear of the decision bar fixed at the bottom.
    bar = page.get_by_role("region", name=f"Decide on operation {agents_own.pk}")
    assert notice.bounding_box()["y"] + notice.bounding_box()["height"] <= (bar.bounding_box()["y"])
    assert fits_the_width(page)
    check_and_keep(page, f"agent-executed-operation-{size['width']}")

    page.goto(f"/operations/{propose('pay-1').pk}/")
    expect(page.get_by_role("heading", level=1)).to_contain_text("ledger.transfer")
    expect(page.get_by_role("region", name=NOTICE)).to_have_count(0)
