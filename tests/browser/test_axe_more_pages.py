"""Pages and states the demo's tour (test_every_page.py) does not reach pass axe-core's
WCAG 2.1 A/AA checks too, on a desktop and on phones from 360 to 414 px wide without
scrolling sideways: an artifact version (its diff against another, a binary one, one
whose bytes are missing) and the password change (refused, then done); and on those
phones a reviewer reaches the decision controls from the queue and decides."""

import re

import pytest
from playwright.sync_api import Page, expect

from runs.models import CheckpointArtifact, Operation, Run
from runs.services.artifacts import attach_artifact
from tests.browser.conftest import PASSWORD, arrived, assert_accessible, sign_in
from tests.conftest import AGENT
from tests.helpers import blob

pytestmark = pytest.mark.django_db(transaction=True)
WIDTHS = [1280, 360, 390, 414]  # a desktop, and the phones docs/guides/index.md names


def fits(page: Page, width: int) -> None:
    """No axe-core violation, and at ``width`` no sideways scroll."""
    page.set_viewport_size({"width": width, "height": 844})
    assert_accessible(page)
    wide = page.evaluate("document.documentElement.scrollWidth - innerWidth")
    assert wide <= 0, f"{page.url} scrolls {wide} px sideways at {width} px"


def artifact_versions(run: Run) -> list[CheckpointArtifact]:
    """Two versions of a report with long lines, a binary file, and a file whose stored
    bytes have gone missing."""
    line = "total " + "1234567890 " * 20
    for content in (f"{line}\nbeta\n", f"{line}\nBETA\ndelta\n"):
        attach_artifact(run=run, name="report.txt", content=content.encode(), actor=AGENT)
    attach_artifact(run=run, name="scan.png", content=bytes(range(256)) * 8, actor=AGENT)
    attach_artifact(run=run, name="lost.txt", content=b"gone\n", actor=AGENT)
    refs = list(CheckpointArtifact.objects.filter(checkpoint__run=run).order_by("checkpoint__seq"))
    blob(refs[-1].artifact).unlink()
    return refs


def test_an_artifact_version_page_passes_axe(page, auditor, run):
    first, second, binary, missing = artifact_versions(run)
    sign_in(page, auditor)
    for url, shown in [
        (f"/audit/artifacts/{second.pk}/", "Changes since checkpoint"),
        (f"/audit/artifacts/{first.pk}/?against={second.pk}", "Changes since checkpoint"),
        (f"/audit/artifacts/{binary.pk}/", "verified against the stored bytes just now"),
        (f"/audit/artifacts/{missing.pk}/", "The stored bytes are missing."),
    ]:
        page.goto(url)
        expect(page.locator("main")).to_contain_text(shown)
        for width in WIDTHS:
            fits(page, width)


def change_password(page: Page, current: str, new: str, again: str) -> None:
    page.get_by_label("Old password").fill(current)
    page.get_by_label("New password:", exact=True).fill(new)
    page.get_by_label("New password confirmation").fill(again)
    page.get_by_role("button", name=re.compile("Change my password", re.IGNORECASE)).click()


def test_the_password_change_page_passes_axe(page, reviewer):
    sign_in(page, reviewer)
    page.goto("/accounts/password_change/")
    for width in WIDTHS:
        fits(page, width)

    change_password(page, "not my password", "a-long-new-passphrase", "a-long-new-passphrase")
    expect(page.locator("body")).to_contain_text("Your old password was entered incorrectly")
    for width in WIDTHS:
        fits(page, width)

    change_password(page, PASSWORD, "a-long-new-passphrase", "another-passphrase")
    expect(page.locator("body")).to_contain_text("The two password fields didn\u2019t match.")
    for width in WIDTHS:
        fits(page, width)

    change_password(page, PASSWORD, "a-long-new-passphrase", "a-long-new-passphrase")
    arrived(page, re.compile(r"/accounts/password_change/done/$"))
    for width in WIDTHS:
        fits(page, width)


@pytest.mark.parametrize("width", WIDTHS[1:])
def test_a_reviewer_reaches_the_decision_controls_on_a_phone(
    page, reviewer, propose, width, accounts
):
    op = propose()
    page.set_viewport_size({"width": width, "height": 844})
    sign_in(page, reviewer)
    page.goto("/approvals/")
    page.locator(f"#op-{op.pk}").get_by_role("link", name="ledger.transfer").click()
    arrived(page, re.compile(rf"/operations/{op.pk}/$"))

    page.get_by_role("link", name="Go to the decision").click()
    approve = page.locator("form.decision-approve").get_by_role("button", name="Approve")
    expect(approve).to_be_in_viewport()
    box = approve.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= width, box
    approve.click()

    expect(page.locator(".messages")).to_contain_text("Approved; a worker carries it out now.")
    assert Operation.objects.get(pk=op.pk).status == "approved"
