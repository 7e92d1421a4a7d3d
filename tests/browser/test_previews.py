"""A reviewer sees each operation's effect before deciding: the file's diff, the
balances a transfer leaves, the email as its recipients read it, the HTTP call as sent
and the resource it changes; approving in the browser keeps the preview shown."""

import json
import re

import pytest
from playwright.sync_api import Page, expect

from runs.actions.files import workspace_of
from runs.canonical import sha256_hex
from runs.models import CheckpointArtifact
from tests.browser.conftest import screenshot, sign_in
from tests.conftest import http_arguments
from tests.helpers import blob

pytestmark = pytest.mark.django_db(transaction=True)


def open_operation(page: Page, op) -> None:
    page.goto(f"/operations/{op.pk}/")
    expect(page.get_by_role("heading", name="What it would change")).to_be_visible()


def test_a_file_change_is_a_diff_and_the_approval_keeps_it(page, reviewer, propose, project):
    readme = workspace_of(project) / "README.md"
    readme.parent.mkdir(parents=True, exist_ok=True)
    readme.write_text("# Project\n\nRun bin/setup.\n")
    arguments = {
        "path": "README.md",
        "content": "# Project\n\nRun bin/demo.\n",
        "expected_sha256": sha256_hex(readme.read_bytes()),
    }
    op = propose("w-1", action="file.write", arguments=arguments, rollback_kind="in_band")
    sign_in(page, reviewer)
    open_operation(page, op)
    diff = page.get_by_label("Changes to README.md")
    expect(diff.locator("span.del")).to_have_text(["- Run bin/setup."])
    expect(diff.locator("span.add")).to_have_text(["+ Run bin/demo."])
    screenshot(page, "preview-file-diff")

    page.locator("form.decision-approve").get_by_role("button", name="Approve").click()
    expect(page.locator(".messages")).to_contain_text("Approved")
    expect(page.locator(".preview")).to_contain_text("As reviewer was shown it when deciding")
    kept = CheckpointArtifact.objects.get(checkpoint__operation=op, name__startswith="previews/")
    assert json.loads(blob(kept.artifact).read_bytes())["lines"][-1] == ["+", "Run bin/demo."]


def test_a_transfer_shows_the_balances_it_leaves(page, reviewer, propose, accounts):
    op = propose(arguments={"from": "A", "to": "B", "amount": "100.00"})
    sign_in(page, reviewer)
    open_operation(page, op)
    rows = page.locator("table.balances tbody tr")
    expect(rows).to_have_text(
        [re.compile(r"A\s*5,000.00\s*4,900.00"), re.compile(r"B\s*0.00\s*100.00")]
    )
    expect(page.locator(".preview")).to_contain_text("It could be made now.")
    screenshot(page, "preview-balances")


def test_an_email_shows_as_its_recipients_read_it(page, settings, reviewer, propose):
    arguments = {
        "to": ["ana@example.com", "cy@example.org"],
        "subject": "June report",
        "body": "<script>alert(1)</script>All green.",
    }
    op = propose("m-1", action="email.send", arguments=arguments, rollback_kind="out_of_band")
    sign_in(page, reviewer)
    open_operation(page, op)
    expect(page.locator("ul.domains li")).to_have_text(
        ["example.com: ana@example.com", "example.org: cy@example.org"]
    )
    expect(page.get_by_label("The message's body")).to_have_text(
        "<script>alert(1)</script>All green."
    )
    screenshot(page, "preview-email")


def test_an_http_call_shows_the_request_and_the_resource(page, reviewer, propose, target):
    arguments = http_arguments(target.base)
    op = propose("h-1", action="http.request", arguments=arguments, rollback_kind="out_of_band")
    sign_in(page, reviewer)
    open_operation(page, op)
    request = page.get_by_label("The request as it will be sent")
    expect(request).to_contain_text(f"PUT {target.base}/items/x")
    expect(request).to_contain_text(f"Idempotency-Key: {op.idempotency_key}")
    expect(page.locator("table.fields tbody tr")).to_have_text(
        [re.compile(r'colour\s*null\s*"green"')]
    )
    screenshot(page, "preview-http")
