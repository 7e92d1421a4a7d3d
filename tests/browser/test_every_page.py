"""Every page of the demo, as its admin and a reviewer see it on a desktop and on a
phone (390 by 844 px), passes axe-core's WCAG 2.1 A/AA checks and, on the phone, never
scrolls sideways (wide tables scroll in their own region): the queue, each run,
operation and request, alerts, the audit search and each run's history, a checkpoint,
the account page, the project's tokens and the cancel form; and the sign-in page as
anyone sees it. Screenshots of the phone layouts go to test-artifacts/screenshots/."""

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from runs.models import Checkpoint, HumanRequest, Operation, Run
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
        "/account/",
        "/projects/demo/tokens/",
        "/projects/demo/numbers/",
        f"/runs/{run.pk}/cancel/",
    ]


PHONE = {"width": 390, "height": 844}
SHOWN_ON_PHONES = {"/approvals/": "phone-queue", "/operations/1/": "phone-operation"}
SHOWN = {"/projects/demo/numbers/": "project-numbers"}


@pytest.mark.parametrize("username", ["admin", "reviewer"])
@pytest.mark.parametrize("phone", [False, True], ids=["desktop", "phone"])
def test_every_page_passes_axe_and_fits_a_phone(page, demo, username, phone):
    if phone:
        page.set_viewport_size(PHONE)
    sign_in(page, get_user_model().objects.get(username=username), PASSWORD)
    checked = []
    for url in pages():
        response = page.goto(url)
        if response.status == 403:  # not for this role
            continue
        assert response.ok, f"{url}: {response.status}"
        assert_accessible(page)
        if phone:
            wide = page.evaluate("document.documentElement.scrollWidth - innerWidth")
            assert wide <= 0, f"{url} scrolls {wide} px sideways on a phone"
            if username == "reviewer" and url in SHOWN_ON_PHONES:
                screenshot(page, SHOWN_ON_PHONES[url])
        elif username == "admin" and url in SHOWN:
            screenshot(page, SHOWN[url])
        checked.append(url)
    assert len(checked) > 20


def test_the_sign_in_page_passes_axe(page, demo):
    page.goto("/accounts/login/")
    assert_accessible(page)
