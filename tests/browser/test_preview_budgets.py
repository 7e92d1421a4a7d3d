"""A change too large to show as a diff, as a reviewer reads it on a desktop and on a
phone: the sentence naming both versions (their sha256 included) wraps, the page does
not scroll sideways, and axe-core finds nothing."""

import random

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import assert_accessible, screenshot, sign_in
from tests.test_preview_budgets import in_workspace, write

pytestmark = pytest.mark.django_db(transaction=True)
SIDEWAYS = "() => document.documentElement.scrollWidth - innerWidth"


@pytest.mark.parametrize("size", [(1280, 800), (390, 844)], ids=["desktop", "phone"])
def test_a_change_too_large_for_a_diff_reads_well(page, reviewer, propose, project, size):
    shuffled = random.Random(35)
    old = "".join(f"{shuffled.randrange(40)}\n" for _ in range(80_000))
    new = "".join(f"{shuffled.randrange(40)}\n" for _ in range(80_000))
    op = write(propose, "logs/today.txt", new, in_workspace(project, "logs/today.txt", old))
    page.set_viewport_size({"width": size[0], "height": size[1]})
    sign_in(page, reviewer)

    page.goto(f"/operations/{op.pk}/")

    preview = page.locator(".preview")
    expect(preview).to_contain_text("too large to show as a diff (80,000 lines")
    expect(preview).to_contain_text("more lines not shown.")
    assert page.evaluate(SIDEWAYS) <= 0
    assert_accessible(page)
    screenshot(page, f"preview-too-large-{size[0]}")
