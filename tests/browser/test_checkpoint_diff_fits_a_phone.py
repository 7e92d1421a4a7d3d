"""A checkpoint's diff on a phone and a desktop: a long token (an arguments hash, an
idempotency key, a long path) wraps inside its cell, so the table's last column is in
sight without scrolling its region sideways, and the page never scrolls sideways: from
360 px, against the previous checkpoint ("Before") and against another one (its number
in the heading)."""

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from runs.models import Checkpoint
from tests.browser.conftest import assert_accessible, sign_in

pytestmark = pytest.mark.django_db(transaction=True)
PASSWORD = "diff-password"
# How far the diff's last column reaches past its region's right edge, how far the
# region scrolls sideways, and how far the page does.
OVERFLOWS = """() => {
  const region = document.querySelector('[role=region][aria-label="What changed"]');
  const last = region.querySelector("thead th:last-child").getBoundingClientRect();
  return {
    lastColumn: Math.round(last.right - region.getBoundingClientRect().right),
    region: region.scrollWidth - region.clientWidth,
    page: document.documentElement.scrollWidth - innerWidth,
  };
}"""


@pytest.fixture
def demo(monkeypatch):
    monkeypatch.setenv("OVERSIGHT_DEMO_PASSWORD", PASSWORD)
    call_command("seed_demo", stdout=None)


@pytest.mark.parametrize("against", ["", "?against=1"], ids=["previous", "first"])
@pytest.mark.parametrize(
    "size", [(360, 844), (390, 844), (1280, 800)], ids=["360", "390", "desktop"]
)
def test_the_last_column_of_the_diff_is_in_sight(page, demo, size, against):
    proposed = Checkpoint.objects.filter(event="operation.proposed").order_by("pk").first()
    page.set_viewport_size({"width": size[0], "height": size[1]})
    sign_in(page, get_user_model().objects.get(username="auditor"), PASSWORD)

    page.goto(f"/audit/checkpoints/{proposed.pk}/{against}")

    assert proposed.state["pending_operations"][-1]["arguments_hash"] in page.content()
    overflows = page.evaluate(OVERFLOWS)
    assert overflows["lastColumn"] <= 0 and overflows["region"] <= 0 and overflows["page"] <= 0
    assert_accessible(page)
