"""Tap targets on the pages a reviewer works on a phone and at a desk (the queue, an
operation, a request, the runs list): every link, button, disclosure and field is at
least 24 by 24 px (WCAG 2.2, 2.5.8), links inside a sentence excepted as WCAG excepts
them; on a phone the controls a thumb works (the navigation, the account links,
buttons, disclosures, fields, the filters' Clear) are 44 px high. Every disclosure is
opened first, so that the forms inside are measured too."""

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from runs.models import HumanRequest, Operation
from tests.browser.conftest import assert_accessible, sign_in

pytestmark = pytest.mark.django_db(transaction=True)
PASSWORD = "tap-targets-password"
TARGETS = "a[href], button, summary, select, input:not([type=hidden]), textarea"
THUMB = (
    "header nav a, .who a, .who button, button, .button, summary, select, textarea,"
    " input[type=text], input[type=password], input[type=date], input[type=number],"
    " .filters > a"
)
# Every target in sight (not hidden, not off the page like the skip link until it is
# focused), with its size, whether a thumb works it, and whether it sits in a sentence:
# a link whose paragraph, item or cell also holds words that are not a target.
MEASURED = """([targets, thumb]) => {
  document.querySelectorAll("details").forEach(details => { details.open = true; });
  const inSentence = element => {
    const block = element.tagName === "A" && element.closest("p, li, dd, td, blockquote");
    if (!block || block.matches(".crumbs")) return false;
    const words = block.cloneNode(true);
    words.querySelectorAll(targets).forEach(target => target.remove());
    return /\\p{L}{2,}/u.test(words.textContent);
  };
  return [...document.querySelectorAll(targets)].flatMap(element => {
    const box = element.getBoundingClientRect();
    const shown = box.width > 1 && box.height > 1 && box.right > 0
      && getComputedStyle(element).visibility !== "hidden";
    if (!shown) return [];
    const name = (element.innerText || element.name || element.id || element.type).trim();
    return [{
      target: `${element.tagName.toLowerCase()} ${name.replace(/\\s+/g, " ").slice(0, 40)}`,
      width: Math.round(box.width), height: Math.round(box.height),
      thumb: element.matches(thumb), inSentence: inSentence(element),
    }];
  });
}"""


@pytest.fixture
def demo(monkeypatch):
    monkeypatch.setenv("OVERSIGHT_DEMO_PASSWORD", PASSWORD)
    call_command("seed_demo", stdout=None)


def pages() -> list[str]:
    operation = Operation.objects.filter(status="proposed").order_by("pk").first()
    request = HumanRequest.objects.filter(status="open").order_by("pk").first()
    return ["/approvals/", f"/operations/{operation.pk}/", f"/requests/{request.pk}/", "/runs/"]


@pytest.mark.parametrize("size", [(390, 844), (1280, 800)], ids=["phone", "desktop"])
def test_every_target_is_big_enough_to_tap(page, demo, size):
    width, height = size
    phone = width < 640
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, get_user_model().objects.get(username="reviewer"), PASSWORD)
    small = []
    for url in pages():
        page.goto(url)
        assert_accessible(page)
        measured = page.evaluate(MEASURED, [TARGETS, THUMB])
        assert len(measured) > 5, url
        small += [
            f"{url} {m['target']}: {m['width']}x{m['height']}"
            for m in measured
            if not m["inSentence"]
            and (m["width"] < 24 or m["height"] < (44 if phone and m["thumb"] else 24))
        ]
    assert small == [], "\n".join(small)
