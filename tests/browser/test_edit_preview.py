"""Editing is two steps in the browser: the reviewer edits the arguments, sees what the
edited operation would change, then approves that; afterwards the page shows the effect
as they approved it, the edit included."""

import json

import pytest
from playwright.sync_api import expect

from runs.canonical import sha256_hex
from tests.browser.conftest import assert_accessible, sign_in
from tests.test_previews import readme, write  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)

ADDED = "Then run bin/test."


def test_an_edit_is_previewed_then_approved(page, reviewer, propose, readme):  # noqa: F811
    page.set_viewport_size({"width": 1280, "height": 800})
    proposed = "# Project\n\nRun bin/demo.\n"
    op = write(propose, "README.md", proposed, sha256_hex(readme.read_bytes()))
    sign_in(page, reviewer)
    page.goto(f"/operations/{op.pk}/")

    page.locator("details.more summary", has_text="Edit and approve").click()
    editor = page.locator("form.editor").get_by_label("Arguments (JSON)")
    edited = {**json.loads(editor.input_value()), "content": f"{proposed}{ADDED}\n"}
    editor.fill(json.dumps(edited, indent=2))
    page.get_by_role("button", name="Preview the edit").click()

    expect(page.get_by_role("heading", name="What it would change with your edit")).to_be_visible()
    diff = page.get_by_label("Changes to README.md")
    expect(diff.locator("span.add")).to_have_text(["+ Run bin/demo.", f"+ {ADDED}"])
    changes = page.get_by_label("Your changes to the arguments")
    expect(changes.locator("span.add")).to_contain_text([ADDED])
    assert op.decisions.count() == 0
    assert_accessible(page)
    page.screenshot(path="/tmp/editpreview.png", full_page=True)

    page.get_by_role("button", name="Approve the edited arguments").click()

    expect(page.locator(".messages")).to_contain_text("Approved; a worker carries it out now.")
    preview = page.locator(".preview")
    expect(preview).to_contain_text("As reviewer was shown it when deciding")
    expect(preview.get_by_label("Changes to README.md").locator("span.add")).to_have_text(
        ["+ Run bin/demo.", f"+ {ADDED}"]
    )
