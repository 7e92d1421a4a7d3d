"""Every page of the demo, as its admin and a reviewer see it on a desktop and on
phones from 360 to 414 px wide (360, 390 and 414 by 844 px), passes axe-core's WCAG 2.1
A/AA checks and, on a phone, never scrolls sideways (wide tables scroll in their own
region): the queue, each run, operation and request, alerts, the audit search and each
run's history, a checkpoint, an artifact version, the account page and its password
change, the project's tokens and webhooks, the cancel form and the requeue page; and the
sign-in page as anyone sees it. Screenshots of the 390 px layouts go to
test-artifacts/screenshots/."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from runs.models import Checkpoint, CheckpointArtifact, HumanRequest, Operation, Run
from tests.browser.conftest import assert_accessible, screenshot, sign_in

pytestmark = pytest.mark.django_db(transaction=True)
PASSWORD = "every-page-password"


@pytest.fixture
def demo(monkeypatch):
    monkeypatch.setenv("OVERSIGHT_DEMO_PASSWORD", PASSWORD)
    call_command("seed_demo", stdout=None)


def pages() -> list[str]:
    run = Run.objects.filter(status__in=["running", "waiting"]).first()
    return [
        "/",
        "/approvals/",
        "/runs/",
        *[f"/runs/{pk}/" for pk in Run.objects.values_list("pk", flat=True)],
        *[f"/operations/{pk}/" for pk in Operation.objects.values_list("pk", flat=True)],
        *[f"/requests/{pk}/" for pk in HumanRequest.objects.values_list("pk", flat=True)],
        "/alerts/",
        "/audit/",
        *[f"/audit/runs/{pk}/" for pk in Run.objects.values_list("pk", flat=True)],
        f"/audit/checkpoints/{Checkpoint.objects.order_by('pk').first().pk}/",
        f"/audit/artifacts/{CheckpointArtifact.objects.order_by('pk').first().pk}/",
        "/account/",
        "/accounts/password_change/",
        "/projects/demo/tokens/",
        "/projects/demo/webhooks/",
        "/projects/demo/numbers/",
        f"/runs/{run.pk}/cancel/",
        f"/operations/{Operation.objects.order_by('pk').first().pk}/requeue/",
    ]


PHONES = [360, 390, 414]  # px wide (844 high): docs/guides/index.md promises 360 to 414
SCREENSHOT_WIDTH = 390
SHOWN_ON_PHONES = {"/approvals/": "phone-queue", "/operations/1/": "phone-operation"}
SHOWN = {"/projects/demo/numbers/": "project-numbers"}


@pytest.mark.parametrize("username", ["admin", "reviewer"])
@pytest.mark.parametrize("phone", [None, *PHONES], ids=["desktop", *map(str, PHONES)])
def test_every_page_passes_axe_and_fits_phones_from_360_to_414_px(page, demo, username, phone):
    if phone:
        page.set_viewport_size({"width": phone, "height": 844})
    sign_in(page, get_user_model().objects.get(username=username), PASSWORD)
    checked = []
    for url in pages():
        response = page.goto(url)
        if response.status == 403:  # not for this role
            continue
        assert response.ok, f"{url}: {response.status}"
        assert_accessible(page)
        # A name on a <pre> is ignored without a role that takes one (ARIA 1.2).
        assert page.locator("pre[aria-label]:not([role])").count() == 0, url
        if phone:
            wide = page.evaluate("document.documentElement.scrollWidth - innerWidth")
            assert wide <= 0, f"{url} scrolls {wide} px sideways on a phone"
            if username == "reviewer" and phone == SCREENSHOT_WIDTH and url in SHOWN_ON_PHONES:
                screenshot(page, SHOWN_ON_PHONES[url])
        elif username == "admin" and url in SHOWN:
            screenshot(page, SHOWN[url])
        checked.append(url)
    assert len(checked) > 20


def test_the_sign_in_page_passes_axe(page, demo):
    page.goto("/accounts/login/")
    assert_accessible(page)


@pytest.mark.parametrize("phone", [None, SCREENSHOT_WIDTH], ids=["desktop", "phone"])
def test_every_page_passes_axe_in_the_dark_theme(page, demo, phone):
    """Where the system is dark, every page is too (prefers-color-scheme), with every
    colour pair still at AA contrast: axe-core checks them as they are drawn."""
    page.emulate_media(color_scheme="dark")
    if phone:
        page.set_viewport_size({"width": phone, "height": 844})
    sign_in(page, get_user_model().objects.get(username="admin"), PASSWORD)
    for url in pages():
        response = page.goto(url)
        if response.status == 403:  # not for an admin
            continue
        assert response.ok, f"{url}: {response.status}"
        background = page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert max(map(int, re.findall(r"\d+", background))) < 32, f"{url}: {background}"
        assert_accessible(page)
    screenshot(page, "dark-" + ("phone" if phone else "desktop") + "-cancel")
    page.goto(f"/operations/{Operation.objects.order_by('pk').first().pk}/")
    screenshot(page, "dark-" + ("phone" if phone else "desktop") + "-operation")


def test_the_key_legend_is_not_shown_on_a_touch_screen(browser, live_server, demo):
    """The single keys are for a keyboard: a phone has none to press them with."""
    legends = {}
    for touch in (False, True):
        context = browser.new_context(
            base_url=live_server.url,
            has_touch=touch,
            is_mobile=touch,
            viewport={"width": 390, "height": 844},
        )
        page = context.new_page()
        sign_in(page, get_user_model().objects.get(username="reviewer"), PASSWORD)
        page.goto("/approvals/")
        legends[touch] = page.locator(".keys").is_visible()
        context.close()
    assert legends == {False: True, True: False}
