"""The top navigation on a phone (360 to 414 px) and a desktop: every link is in
sight, whole and not covered, so none is reachable only by scrolling a strip whose end
nothing shows; the navigation scrolls nothing it hides, and the page never scrolls
sideways."""

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from tests.browser.conftest import assert_accessible, sign_in

pytestmark = pytest.mark.django_db(transaction=True)
PASSWORD = "navigation-password"
# Each link of the navigation: whether it is whole inside the window, and whether it
# is what a tap at its centre reaches (nothing covers it).
LINKS = """() => [...document.querySelectorAll("header nav a")].map(link => {
  const box = link.getBoundingClientRect();
  const hit = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
  return {
    name: link.innerText.replace(/\\s+/g, " ").trim(),
    whole: box.left >= 0 && box.right <= innerWidth && box.top >= 0 && box.bottom <= innerHeight,
    reached: link.contains(hit),
  };
})"""
HIDDEN_IN_NAV = """() => {
  const nav = document.querySelector("header nav");
  return nav.scrollWidth - nav.clientWidth;
}"""


@pytest.fixture
def demo(monkeypatch):
    monkeypatch.setenv("OVERSIGHT_DEMO_PASSWORD", PASSWORD)
    call_command("seed_demo", stdout=None)


@pytest.mark.parametrize("username", ["admin", "reviewer"])
@pytest.mark.parametrize(
    "size", [(360, 844), (390, 844), (414, 844), (1280, 800)], ids=lambda s: f"{s[0]}"
)
def test_every_navigation_link_is_whole_in_sight(page, demo, username, size):
    width, height = size
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, get_user_model().objects.get(username=username), PASSWORD)

    page.goto("/")

    links = page.evaluate(LINKS)
    names = [link["name"] for link in links]
    assert "Overview" in names and ("Admin" in names) == (username == "admin")
    assert [link["name"] for link in links if not (link["whole"] and link["reached"])] == []
    assert page.evaluate(HIDDEN_IN_NAV) <= 0
    assert page.evaluate("document.documentElement.scrollWidth - innerWidth") <= 0
    assert_accessible(page)
