"""The numbers page as an admin reads it on a desktop (1280 by 800) and a phone (390 by
844), with no axe-core violation: times in words ("4 min 10 s"), people's decisions
apart from what a policy approved on its own, and the charts' text at least 12 px as
drawn (a chart scaled to the page's width once printed it at 8 px, and 6 on a phone)."""

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from runs.models import ApprovalPolicy, Operation
from tests.browser.conftest import assert_accessible, sign_in
from tests.helpers import decide_on

pytestmark = pytest.mark.django_db(transaction=True)
SIZES = [{"width": 1280, "height": 800}, {"width": 390, "height": 844}]
# Each chart text's size as drawn: its font size times the scale from its coordinates
# to the screen's (a viewBox shrinks both the text and its box).
DRAWN_TEXT = """() => Array.from(document.querySelectorAll("svg.chart text"), t => ({
  text: t.textContent,
  size: parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a,
  height: t.getBoundingClientRect().height,
}))"""


@pytest.fixture
def reviewed(project, propose, reviewer):
    """One operation a reviewer decided 4 min 10 s after it was proposed, and three that
    a policy approved on its own."""
    op = propose("call-1")
    proposed = timezone.now() - timedelta(seconds=250)
    Operation.objects.filter(pk=op.pk).update(created_at=proposed)
    decide_on(op, reviewer)
    ApprovalPolicy.objects.create(
        project=project, action="ledger.transfer", approvals_required=ApprovalPolicy.Approvals.AUTO
    )
    for n in range(3):
        assert propose(f"auto-{n}").status == "approved"


@pytest.mark.parametrize("size", SIZES, ids=["desktop", "phone"])
def test_the_numbers_count_people_s_decisions_in_plain_words(
    page, admin_user, project, reviewed, size
):
    page.set_viewport_size(size)
    sign_in(page, admin_user)
    page.goto(f"/projects/{project.slug}/numbers/")

    decision_time = page.locator(
        "section", has=page.get_by_role("heading", name="Time to decision")
    )
    expect(decision_time.get_by_role("img", name="Median time to decision")).to_be_visible()
    expect(decision_time.locator("svg text").first).to_have_text("4 min 10 s")
    page.get_by_text("Each day's numbers").click()
    today = page.get_by_role("region", name="Each day's numbers").get_by_role("row").last
    expect(today.get_by_role("cell")).to_have_text(["0", "—", "1", "4 min 10 s", "4 min 10 s"])
    expect(page.locator("main")).not_to_contain_text("e-0")

    who = page.locator("section", has=page.get_by_role("heading", name="Who decides"))
    expect(who).to_contain_text("1 decision by people: 0% rejected, 0% edited before approval.")
    expect(who).to_contain_text("3 operations approved by policy")
    expect(who.get_by_role("table").get_by_role("cell")).to_have_text(["reviewer", "1"])
    assert_accessible(page)


@pytest.mark.parametrize("size", SIZES, ids=["desktop", "phone"])
def test_the_charts_text_is_drawn_at_least_12_px(page, admin_user, project, reviewed, size):
    page.set_viewport_size(size)
    sign_in(page, admin_user)
    page.goto(f"/projects/{project.slug}/numbers/")
    drawn = page.evaluate(DRAWN_TEXT)
    assert len(drawn) >= 5 * 2  # each chart's highest value and its labels
    small = [text for text in drawn if text["size"] < 12 or text["height"] < 12]
    assert not small, small
    wide = page.evaluate("document.documentElement.scrollWidth - innerWidth")
    assert wide <= 0, f"the page scrolls {wide} px sideways"
