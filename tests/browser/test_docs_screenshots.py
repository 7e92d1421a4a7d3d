"""The guides' screenshots (docs/img/), taken while each role does a task of its guide
(docs/guides/) on the demo's data, and checked for what the guide tells the reader they
will see there: a screenshot of a sign-in page, an empty list or a broken page fails.

The PNGs go to docs/img/ only with ``OVERSIGHT_DOCS_SCREENSHOTS=1`` (``bin/screenshots``
sets it), so that a test run anywhere else leaves the checkout clean; otherwise they go
to test-artifacts/screenshots/docs/. Each is the 1280 by 800 viewport (cut below a short
page's content) unless a guide needs the whole page, or one part of it."""

import csv
import json
import os
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from playwright.sync_api import Locator, Page, expect

from runs.actions.files import workspace_of
from runs.actors import Actor
from runs.clock import db_now
from runs.engine.webhooks import MAX_ATTEMPTS, deliver_webhooks
from runs.engine.worker import Worker
from runs.models import AgentToken, Alert, HumanRequest, Operation, Project, Run
from runs.services.proposals import propose_operation
from runs.services.runs import start_run
from tests.browser.conftest import REPO_ROOT, SCREENSHOTS, arrived, assert_accessible, sign_in
from tests.conftest import http_arguments
from tests.helpers import decide_on

# Fresh numbering for each test: the pictures say "Run 1", whatever ran before.
pytestmark = pytest.mark.django_db(transaction=True, reset_sequences=True)

PASSWORD = "docs-screenshots"
VIEWPORT = {"width": 1280, "height": 800}
CONTENT_BOTTOM = (
    "Math.max(...Array.from(document.body.children, e => e.getBoundingClientRect().bottom))"
)
# An element's box in the page's coordinates, wherever the window is scrolled.
ON_THE_PAGE = """e => {
  const box = e.getBoundingClientRect();
  return {x: box.x + scrollX, y: box.y + scrollY, width: box.width, height: box.height};
}"""
DOCS_IMG = REPO_ROOT / "docs" / "img"
AGENT = Actor.agent("demo-agent")
# What seed_demo leaves waiting: a README edit, an invoice one reviewer of two
# approved, two bills that together overdraw the marketing account, and a question.
README_GOAL = "Update the README with the new install steps"
INVOICE_GOAL = "Pay invoice INV-2291 to ACME Supplies"
QUESTION = "Which region should the analytics cluster go to?"
SIGNATURE = "Questions: support@example.com."


def save(page: Page, name: str, part: Locator | None = None, full_page: bool = False) -> Path:
    """The viewport (or the whole page, or only ``part`` of it) as <name>.png in
    docs/img/ or test-artifacts/, once the page passes axe-core's checks, as every
    screenshot must."""
    assert_accessible(page)
    docs = os.environ.get("OVERSIGHT_DOCS_SCREENSHOTS") == "1"
    folder = DOCS_IMG if docs else SCREENSHOTS / "docs"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    if part is not None:
        # Cut from the whole page, not from the window: scrolled into the window, a
        # part taller than the window less the decision bar's scroll padding had its
        # top above it, where nothing is painted (an empty band atop docs/img/edit.png).
        # The bar stays at the window's foot, not the part's: it is hidden.
        clip = part.evaluate(ON_THE_PAGE)
        page.screenshot(
            path=str(path), full_page=True, clip=clip, style=".decision-bar { display: none; }"
        )
    elif full_page:
        page.screenshot(path=str(path), full_page=True)
    else:  # A short page is cut below its content, not padded with empty background.
        bottom = page.evaluate(CONTENT_BOTTOM)
        height = min(VIEWPORT["height"], bottom + 24)
        clip = {"x": 0, "y": 0, "width": VIEWPORT["width"], "height": height}
        page.screenshot(path=str(path), clip=clip)
    return path


def nav(page: Page, name: str) -> Locator:
    """A link of the main navigation (Approvals and Alerts end with a count)."""
    main = page.get_by_role("navigation", name="Main")
    return main.get_by_role("link", name=re.compile(f"^{name}"))


def user(username: str):
    return get_user_model().objects.get(username=username)


def as_demo_user(page: Page, username: str) -> None:
    sign_in(page, user(username), PASSWORD)


def propose(project: Project, goal: str, call_id: str, action: str, arguments: dict, **kwargs):
    """A new run of the demo agent's session with ``goal``, and its proposal."""
    run = start_run(session=project.sessions.get(), goal=goal, actor=AGENT)
    kwargs.setdefault("risk", Operation.Risk.MEDIUM)
    return propose_operation(
        run=run,
        call_id=call_id,
        action=action,
        arguments=arguments,
        base_version=run.version,
        actor=AGENT,
        **kwargs,
    )


@pytest.fixture
def demo(monkeypatch, page) -> Project:
    """The demo's project, users and runs (``seed_demo``), with two more proposals
    waiting beside them (an email, a new note), and the browser at the guides' size."""
    monkeypatch.setenv("OVERSIGHT_DEMO_PASSWORD", PASSWORD)
    call_command("seed_demo", stdout=None)
    project = Project.objects.get(slug="demo")
    email = {
        "to": ["customers@example.com"],
        "subject": "Maintenance on Saturday 06:00-08:00 UTC",
        "body": "The service will be read-only for two hours.",
    }
    propose(
        project,
        "Announce Saturday's maintenance window",
        "announce-maintenance",
        "email.send",
        email,
        rollback_kind=Operation.RollbackKind.OUT_OF_BAND,
        summary="Tell customers about Saturday's maintenance window.",
    )
    note = {"path": "notes/standup.md", "content": "- Billing: done\n", "expected_sha256": None}
    propose(
        project,
        "Write up today's stand-up",
        "standup-notes",
        "file.write",
        note,
        rollback_kind=Operation.RollbackKind.IN_BAND,
        risk=Operation.Risk.LOW,
    )
    page.set_viewport_size(VIEWPORT)
    return project


@pytest.fixture
def committed(demo) -> Operation:
    """The demo's README edit, approved by ``reviewer`` and committed by a worker."""
    readme = Operation.objects.get(run__goal=README_GOAL)
    decide_on(readme, user("reviewer"), comment="Matches the new install guide.")
    Worker(name="worker-1").drain()
    readme.refresh_from_db()
    assert readme.status == Operation.Status.COMMITTED
    assert (workspace_of(demo) / "README.md").read_text() == "# Project\n\nRun bin/demo.\n"
    return readme


def test_reviewer_sees_the_queue_and_approves_an_operation_on_its_preview(page, demo):
    """Reviewers' guide: the queue, an operation's page with its diff, Approve."""
    readme = Operation.objects.get(run__goal=README_GOAL)
    as_demo_user(page, "reviewer")
    nav(page, "Approvals").click()
    expect(page).to_have_title("(7) Approvals · Oversight")
    queue = page.locator("#queue")
    expect(queue).to_contain_text(
        "6 operations waiting for a decision and 1 request for an answer, oldest first."
    )
    asked = queue.locator("table.requests tbody tr")
    expect(asked).to_have_count(1)
    expect(asked).to_contain_text(QUESTION)
    expect(asked).to_contain_text("Choose one of 2")
    operations = queue.locator("table.queue:not(.requests) tbody tr")
    transfers = ["ledger.transfer"] * 3  # the invoice, and the marketing account's two bills
    expect(operations.locator("td.lead code")).to_have_text(
        ["file.write", *transfers, "email.send", "file.write"]
    )
    expect(operations.locator("td[data-label=Risk]")).to_have_text(
        ["Medium", "High", "High", "High", "Medium", "Low"]
    )
    expect(operations.locator("td[data-label=Approvals]")).to_have_text(
        ["0 of 1", "1 of 2", "0 of 2", "0 of 2", "0 of 1", "0 of 1"]
    )
    expect(queue).to_contain_text("Agent says: Tell customers about Saturday's maintenance")
    save(page, "queue")

    operations.first.get_by_role("link", name="file.write").click()
    arrived(page, re.compile(rf"/operations/{readme.pk}/$"))
    expect(page.locator("#outcome .status")).to_have_text("Proposed")
    diff = page.get_by_label("Changes to README.md")
    expect(diff.locator("span.del")).to_have_text(["- Old install steps."])
    expect(diff.locator("span.add")).to_have_text(["+ Run bin/demo."])
    expect(page.locator("#next-operation")).to_contain_text("ledger.transfer")
    save(page, "operation")

    approve = page.locator("form.decision-approve")
    approve.get_by_label("Comment (optional)").fill("Matches the new install guide.")
    approve.get_by_role("button", name="Approve").click()
    expect(page.locator(".messages")).to_have_text(
        f"Operation {readme.pk} (file.write): Approved; a worker carries it out now."
        " This one waits for you next."
    )
    expect(page.locator("h1")).to_contain_text("ledger.transfer")
    readme.refresh_from_db()
    assert readme.status == Operation.Status.APPROVED


def test_reviewer_sees_two_transfers_that_together_would_overdraw_their_account(page, demo):
    """Reviewers' guide: the others waiting on the same account, and what they would do
    together, on a transfer's page."""
    as_demo_user(page, "reviewer")
    nav(page, "Approvals").click()
    page.get_by_role("link", name=re.compile("marketing → northwind-events: 12,500.00")).click()
    expect(page.locator("h1")).to_contain_text("ledger.transfer")
    siblings = page.locator("#siblings")
    expect(siblings.get_by_role("heading")).to_have_text("Also waiting on account marketing")
    expect(siblings.locator("li")).to_contain_text(["marketing → brightline-ads: 9,800.00"])
    expect(siblings.get_by_role("note")).to_have_text(
        "Together they would overdraw marketing, though each fits on its own: these 2 "
        "transfers, this one included, draw 22,300.00 from it, 2,300.00 more than the "
        "20,000.00 it holds now. Those carried out first go through; the others will be "
        "refused."
    )
    save(page, "siblings", part=siblings)


def test_reviewer_edits_an_email_before_approving_it(page, demo):
    """Reviewers' guide: Edit and approve, on an email that cannot be undone: the edit
    previewed, then approved."""
    email = Operation.objects.get(call_id="announce-maintenance")
    as_demo_user(page, "reviewer")
    nav(page, "Approvals").click()
    page.get_by_role("link", name="email.send").click()
    page.locator("details.more summary", has_text="Edit and approve").click()
    edited = {**email.arguments, "body": f"{email.arguments['body']} {SIGNATURE}"}
    page.locator("form.editor").get_by_label("Arguments (JSON)").fill(
        json.dumps(edited, indent=2, sort_keys=True)
    )
    page.get_by_role("button", name="Preview the edit").click()
    expect(page.get_by_label("The message's body")).to_contain_text(SIGNATURE)
    edit = page.locator("form.decision-edit")
    edit.get_by_label("Comment (optional)").fill("Customers need a way to ask.")
    edit.get_by_label("This cannot be undone. Type email.send to confirm").fill("email.send")
    save(page, "edit", part=page.locator("#decision"))

    edit.get_by_role("button", name="Approve the edited arguments").click()
    expect(page.locator(".messages")).to_contain_text("Approved; a worker carries it out now.")
    page.goto(f"/operations/{email.pk}/")
    expect(page.locator("#outcome .status")).to_have_text("Approved")
    expect(page.get_by_label("Changes from the proposal").locator("span.add")).to_contain_text(
        [SIGNATURE]
    )
    email.refresh_from_db()
    assert email.arguments["body"].endswith(SIGNATURE)


def test_reviewer_answers_the_agents_question(page, demo):
    """Reviewers' guide: answer a request, here a choice between two regions."""
    as_demo_user(page, "reviewer")
    nav(page, "Approvals").click()
    page.get_by_role("link", name=QUESTION).click()
    expect(page.get_by_role("heading", level=1)).to_have_text("A choice the agent asks")
    expect(page.locator(".context strong")).to_have_text("Europe")
    choices = page.get_by_role("group", name="Choose one").get_by_role("button")
    expect(choices).to_have_text(["eu-west", "us-east"])
    save(page, "request")

    page.get_by_role("button", name="eu-west").click()
    expect(page.locator(".messages")).to_have_text("Chosen; the agent reads your choice.")
    expect(page.locator("#outcome .status")).to_have_text("Answered")
    expect(page.locator("#answer")).to_contain_text("Choose by reviewer")
    assert HumanRequest.objects.get().answer == "eu-west"


def test_auditor_finds_who_approved_what_and_exports_it(page, committed):
    """Auditors' guide: search by reviewer and decision, export the result as CSV."""
    as_demo_user(page, "auditor")
    nav(page, "Audit").click()
    page.get_by_label("Actor name").fill("reviewer")
    page.get_by_label("Decision").select_option("approve")
    page.get_by_role("button", name="Search").click()
    arrived(page, re.compile(r"actor=reviewer.*decision=approve"))
    rows = page.locator("table.audit tbody tr")
    expect(rows).to_have_count(2)  # the README edit, and one of the payroll's two approvals
    expect(rows.first).to_contain_text("file.write")
    expect(rows.first).to_contain_text("Matches the new install guide.")
    expect(rows.last).to_contain_text("1 of 2 approvals")
    save(page, "audit")

    with page.expect_download() as exported:
        page.locator(".exports").get_by_role("link", name="CSV").click()
    lines = Path(exported.value.path()).read_text().splitlines()
    assert lines[0].startswith("# ")  # what was asked, by whom and when
    found = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    assert [(row["actor"], row["action"]) for row in found] == [
        ("reviewer", "file.write"),
        ("reviewer", "ledger.transfer"),
    ]


def test_auditor_verifies_a_runs_chain_and_reads_a_checkpoint(page, committed):
    """Auditors' guide: a run's history, Verify chain, one checkpoint's decision."""
    as_demo_user(page, "auditor")
    page.goto(f"/runs/{committed.run_id}/")
    page.get_by_role("link", name="audit history").click()
    page.get_by_role("button", name="Verify chain").click()
    expect(page.locator("#chain-result")).to_contain_text("The chain holds.")
    transitions = page.locator("table.audit tbody tr td:nth-child(3)")
    expect(transitions.last).to_contain_text("in_flight → committed")
    save(page, "run-history", full_page=True)

    approval = committed.checkpoints.get(to_status="approved")
    page.get_by_role("link", name=f"#{approval.seq}", exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_have_text(
        f"Checkpoint {approval.seq} of run {committed.run_id}"
    )
    expect(page.locator(".facts").first).to_contain_text("approve by reviewer on arguments")
    expect(page.locator(".chain-ok")).to_have_text(
        ["matches its content", f"links to checkpoint {approval.seq - 1}"]
    )
    changed = page.locator("table.diff-table tr").filter(has_text="pending_operations[0].status")
    expect(changed).to_contain_text('"approved"')
    save(page, "checkpoint")


def test_admin_acknowledges_and_resolves_an_alert(page, demo, target):
    """Admins' guide: an alert, who was told, Acknowledge, Resolve."""
    alert = raise_an_alert(demo, target)
    as_demo_user(page, "admin")
    expect(page.locator("#nav-alerts")).to_have_text("1")
    nav(page, "Alerts").click()
    card = page.locator(f"#alert-{alert.pk}")
    expect(card.get_by_role("heading", level=2)).to_have_text(f"Alert {alert.pk} · Open")
    expect(card).to_contain_text("What failed: verification failed")
    expect(card.locator("ul.deliveries li")).to_have_text(
        [
            "in-app to alerts page: Delivered after 1 attempt",
            "Email to admin@example.com: Delivered after 1 attempt",
        ]
    )
    save(page, "alerts")

    card.get_by_role("button", name="Acknowledge").click()
    expect(page.locator(".messages")).to_have_text(f"Alert {alert.pk} acknowledged.")
    expect(card).to_contain_text("acknowledged by admin")
    card.get_by_label("Resolution note (required)").fill("Set item x by hand; it is green.")
    card.get_by_role("button", name="Resolve").click()
    expect(page.locator(".messages")).to_have_text(
        f"Alert {alert.pk} resolved; its run is released."
    )
    expect(page.get_by_text("No open alerts.")).to_be_visible()
    expect(page.locator("#nav-alerts")).to_have_text("0")


def test_admin_cancels_a_run(page, demo):
    """Admins' guide: cancel the invoice's run, with a reason, from its page."""
    invoice = Run.objects.get(goal=INVOICE_GOAL)
    as_demo_user(page, "admin")
    nav(page, "Runs").click()
    page.get_by_role("link", name=f"Run {invoice.pk}", exact=True).click()
    page.get_by_role("link", name="Cancel run…").click()
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Cancel run {invoice.pk}?")
    page.get_by_label("Reason (required)").fill("Paid by bank transfer on Friday.")
    save(page, "cancel-run")

    page.get_by_role("button", name="Cancel the run").click()
    expect(page.locator(".messages")).to_have_text("The run is cancelled; nothing more will fire.")
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Run {invoice.pk}: Cancelled")
    expect(page.locator("ol.timeline")).to_contain_text("Paid by bank transfer on Friday.")
    assert Operation.objects.get(run=invoice).status == Operation.Status.CANCELLED


def test_admin_issues_an_agent_token(page, demo):
    """Admins' guide: a new agent token, shown once, that authenticates."""
    as_demo_user(page, "admin")
    nav(page, "Overview").click()
    page.get_by_role("link", name="agent tokens").click()
    page.get_by_label("Name").fill("deploy-bot")
    page.get_by_role("button", name="Create token").click()
    expect(page.get_by_role("heading", name="Copy the new token now")).to_be_visible()
    expect(page.get_by_role("row").filter(has_text="deploy-bot")).to_contain_text("Active")
    save(page, "tokens")
    assert AgentToken.authenticate(page.locator("#new-token").input_value()).name == "deploy-bot"


def test_admin_adds_a_webhook_and_reads_its_deliveries(page, demo, receiver, settings):
    """Admins' guide: a webhook added on its page (secret shown once), and the delivery
    log: one delivered to a receiver, one failed to a receiver that is not there."""
    settings.OVERSIGHT_HTTP_ALLOWED_HOSTS += ["127.0.0.1:9"]
    as_demo_user(page, "admin")
    nav(page, "Overview").click()
    page.get_by_role("link", name="webhooks").click()
    for name, url, events in (
        ("Teams bot", receiver.url, ["operation.waiting", "decided"]),
        ("Pager", "http://127.0.0.1:9/oversight", ["operation.waiting"]),
    ):
        page.get_by_label("Name").fill(name)
        page.get_by_label("URL").fill(url)
        for event in events:
            page.get_by_label(event).check()
        page.get_by_role("button", name="Add endpoint").click()
        expect(page.get_by_role("heading", name=f"Copy the secret of {name} now")).to_be_visible()
    note = {"path": "notes/retro.md", "content": "- Went well: billing\n", "expected_sha256": None}
    kind = Operation.RollbackKind.IN_BAND
    propose(demo, "Write up the retro", "retro-notes", "file.write", note, rollback_kind=kind)
    for _attempt in range(MAX_ATTEMPTS):
        deliver_webhooks(db_now() + timedelta(days=2))

    page.goto(page.url)
    log = page.get_by_role("region", name="Deliveries")
    expect(log.get_by_role("row").filter(has_text="Teams bot")).to_contain_text("Delivered")
    expect(log.get_by_role("row").filter(has_text="Pager")).to_contain_text("Failed")
    expect(log.get_by_role("button", name="Send again")).to_be_visible()
    save(page, "webhooks", full_page=True)
    assert [posted["Oversight-Event"] for posted, _, _ in receiver.posts] == ["operation.waiting"]


def raise_an_alert(project: Project, target) -> Alert:
    """An update the demo's policy approves by itself, to a target that garbles it and
    that nothing can undo: a worker commits it, the verification fails, and an alert
    halts the run, delivered in-app and by email to the project's admin."""
    update = propose(
        project,
        "Set item x to green on the status board",
        "status-board",
        "http.request",
        http_arguments(target.base, "rigged"),
        rollback_kind=Operation.RollbackKind.OUT_OF_BAND,
    )
    Worker(name="worker-1").drain()
    update.refresh_from_db()
    assert update.status == Operation.Status.ALERTED
    return Alert.objects.get(operation=update)
