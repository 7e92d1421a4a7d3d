"""The operation page keeps the decision in reach and is honest about an effect that
would fail (#34): a decision bar whose Approve submits the page's own approval form (so
what is approved is what the page shows), shown only to who may decide now; Reject
first, approving a step away, where the preview says the effect cannot be made now; and
a decision on a preview the target has moved past refused with what changed, the page
then bound to the new preview, which alone a second approval can carry."""

import html
import re

import pytest
from django.test import Client

from runs.actions.files import workspace_of
from runs.canonical import sha256_hex
from runs.models import Account, Decision, Operation
from runs.services.previews import preview_hash, preview_of
from tests.conftest import make_user
from tests.helpers import decide_on, page_of, stored
from tests.test_previews import write

EMAIL = {"to": ["ops@example.com"], "subject": "Report", "body": "All green."}
EDITED_TO_OVERDRAW = '{"from": "A", "to": "B", "amount": "6000.00"}'


@pytest.fixture
def as_reviewer(client, reviewer) -> Client:
    client.force_login(reviewer)
    return client


@pytest.fixture
def op(propose, accounts) -> Operation:
    """A transfer of 100 from A, which holds 5000.00: it could be made now."""
    return propose("call-1")


def bar(page: str) -> str | None:
    found = re.search(r'<div class="decision-bar".*?</div>', page, re.S)
    return found[0] if found else None


def form_fields(page: str, form_id: str) -> dict:
    """The hidden fields of the page's form ``form_id``, as the browser sends them."""
    form = re.search(rf'<form [^>]*id="{form_id}".*?</form>', page, re.S)[0]
    fields = re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', form)
    return {name: html.unescape(value) for name, value in fields}


def decide_url(op: Operation) -> str:
    return f"{page_of(op)}decide/"


def test_the_bar_approves_with_the_page_s_own_form(as_reviewer, op):
    page = as_reviewer.get(page_of(op)).text

    assert '<button type="submit" form="approve-form" class="primary">Approve</button>' in bar(page)
    form = form_fields(page, "approve-form")
    assert (form["kind"], form["arguments_hash"]) == ("approve", op.arguments_hash)
    assert form["preview_hash"] == preview_hash(preview_of(op))
    assert '<a class="button" href="#reject-comment">Reject</a>' in bar(page)
    assert '<a class="button" href="#editor-arguments">Edit</a>' in bar(page)
    assert 'id="reject-comment"' in page and 'id="editor-arguments"' in page


def test_while_it_waits_the_status_comes_after_the_preview(as_reviewer, op):
    page = as_reviewer.get(page_of(op)).text
    assert page.index('id="preview-title"') < page.index('id="outcome"')

    other = make_user("reviewer2", op.project, "reviewer")
    decide_on(op, other, preview_hash=preview_hash(preview_of(op)))
    page = as_reviewer.get(page_of(op)).text
    assert page.index('id="outcome"') < page.index('id="preview-title"')
    assert bar(page) is None


def test_who_may_not_decide_now_gets_no_bar(client, owner, auditor, reviewer, propose):
    """Its owner (four eyes), an auditor, and a reviewer who approved already."""
    op = propose(risk=Operation.Risk.HIGH)  # two approvals
    decide_on(op, reviewer)
    for user in (owner, auditor, reviewer):
        client.force_login(user)
        assert bar(client.get(page_of(op)).text) is None, user


def test_an_irreversible_operation_s_bar_leads_to_its_confirmation(as_reviewer, propose):
    op = propose("mail-1", action="email.send", arguments=EMAIL, rollback_kind="out_of_band")
    page = as_reviewer.get(page_of(op)).text
    assert '<a class="button primary" href="#approve-confirm">Approve…</a>' in bar(page)
    assert "<button" not in bar(page)
    assert 'id="approve-confirm"' in page


def test_an_edit_s_bar_approves_the_previewed_edit(as_reviewer, op):
    edited = '{"from": "A", "to": "B", "amount": "250.00"}'
    data = {"arguments_hash": op.arguments_hash, "arguments": edited}
    page = as_reviewer.post(f"{page_of(op)}edit/", data).text

    assert '<button type="submit" form="edit-form" class="primary">Approve the edit</button>' in (
        bar(page)
    )
    assert '<a class="button" href="#editor-arguments">Change the edit</a>' in bar(page)
    form = form_fields(page, "edit-form")
    assert form["kind"] == "edit"
    response = as_reviewer.post(decide_url(op), form)
    assert response.status_code == 302
    op.refresh_from_db()
    assert (op.status, op.arguments["amount"]) == ("approved", "250.00")


def test_an_overdraft_names_the_balance_it_would_leave(propose, accounts):
    op = propose(arguments={"from": "A", "to": "B", "amount": "6000.00"})
    assert preview_of(op)["why"] == (
        "A holds 5,000.00, less than the 6,000.00 to transfer: it would leave A at -1,000.00"
    )


def overdraft(propose, project):
    Account.objects.create(project=project, name="A", balance="50.00")
    Account.objects.create(project=project, name="B", balance="0.00")
    return propose("pay-1")


def stale_file(propose, project):
    (workspace_of(project) / "README.md").parent.mkdir(parents=True, exist_ok=True)
    (workspace_of(project) / "README.md").write_text("changed since\n")
    return write(propose, "README.md", "# Project\n", "0" * 64)


def refused_mail(propose, project):
    arguments = {**EMAIL, "to": ["ops@elsewhere.org"]}
    return propose("mail-1", action="email.send", arguments=arguments, rollback_kind="out_of_band")


def unreadable(propose, project):
    """A file whose preview cannot be made: a link leading out of the workspace."""
    workspace_of(project).mkdir(parents=True, exist_ok=True)
    (workspace_of(project) / "link.md").symlink_to("/etc/hostname")
    return write(propose, "link.md", "text\n", None)


@pytest.mark.parametrize("doomed", [overdraft, stale_file, refused_mail, unreadable])
def test_where_the_preview_says_it_would_fail_reject_comes_first(
    as_reviewer, settings, propose, project, doomed
):
    settings.OVERSIGHT_EMAIL_ALLOWED_DOMAINS = ["example.com"]
    op = doomed(propose, project)
    page = as_reviewer.get(page_of(op)).text

    forms = re.findall(r'<form [^>]*class="decision (decision-\w+)', page)
    assert forms[0] == "decision-reject"
    reject = re.search(r'id="reject-form".*?</form>', page, re.S)[0]
    assert '<button type="submit" class="primary">Reject</button>' in reject
    folded = r'<details class="more">\s*<summary>Approve anyway</summary>\s*<form [^>]*id="approve-'
    assert re.search(folded + 'form"', page)
    assert "Approve anyway</button>" in page
    links = re.findall(r'<a class="button( primary)?" href="#([\w-]+)">([^<]+)</a>', bar(page))
    approve_at = "approve-confirm" if op.action == "email.send" else "approve-comment"
    assert links == [
        (" primary", "reject-comment", "Reject"),
        ("", approve_at, "Approve anyway"),
        ("", "editor-arguments", "Edit"),
    ]
    assert "<button" not in bar(page)


def test_where_it_could_be_made_approve_comes_first(as_reviewer, op):
    page = as_reviewer.get(page_of(op)).text
    forms = re.findall(r'<form [^>]*class="decision (decision-\w+)', page)
    assert forms[0] == "decision-approve"
    assert "Approve anyway" not in page


def test_a_stale_preview_says_what_changed_and_never_approves(as_reviewer, op):
    seen = form_fields(as_reviewer.get(page_of(op)).text, "approve-form")
    Account.objects.filter(name="A").update(balance="4000.00")
    before = stored()

    response = as_reviewer.post(decide_url(op), seen)

    assert response.status_code == 400
    assert stored() == before
    changed = re.search(
        r'<div class="error-summary" id="preview-changed"[^>]*>(.*?)</div>', response.text, re.S
    )
    assert 'role="alert" tabindex="-1" autofocus' in changed[0]
    assert re.findall(r"<p>(.*?)</p>", changed[1]) == [
        "The balance of A changed since you looked: it was 5,000.00, it is now 4,000.00.",
        "<strong>Nothing was decided.</strong> Look at the new preview below before you decide.",
    ]
    assert response.text.count("autofocus") == 1  # The focus goes to it, nowhere else.
    assert response.text.index('id="preview-changed"') < response.text.index('id="preview-title"')
    # The same approval sent again is refused again: the old preview is never approved.
    assert as_reviewer.post(decide_url(op), seen).status_code == 400
    assert stored() == before
    # The page came back bound to the preview it shows now; only that form approves.
    again = form_fields(response.text, "approve-form")
    assert again["preview_hash"] == preview_hash(preview_of(op)) != seen["preview_hash"]
    assert as_reviewer.post(decide_url(op), again).status_code == 302
    decision = Decision.objects.get(operation=op)
    assert decision.preview_sha256 == again["preview_hash"]


def test_a_stale_file_preview_says_the_file_changed(as_reviewer, propose, project):
    readme = workspace_of(project) / "README.md"
    readme.parent.mkdir(parents=True, exist_ok=True)
    readme.write_text("# Project\n")
    op = write(propose, "README.md", "# Project\n\nRun bin/demo.\n", sha256_hex(b"# Project\n"))
    seen = form_fields(as_reviewer.get(page_of(op)).text, "approve-form")
    readme.write_text("# Another project\n")

    response = as_reviewer.post(decide_url(op), seen)

    assert response.status_code == 400
    assert (
        "The file README.md changed since you looked: it is no longer the one the agent "
        "based its change on, so the write would be refused."
    ) in response.text


def test_an_edit_that_would_fail_offers_changing_it_first(as_reviewer, op):
    data = {"arguments_hash": op.arguments_hash, "arguments": EDITED_TO_OVERDRAW}
    page = as_reviewer.post(f"{page_of(op)}edit/", data).text

    assert "With your edit, the preview says it would fail as things are now" in page
    change = page.index("<summary>Change the edit</summary>")
    assert page.index("<summary>Approve the edit anyway</summary>") > change
    assert '<details class="more" open>\n    <summary>Change the edit</summary>' in page
    assert "Approve the edited arguments anyway</button>" in page
    links = re.findall(r'<a class="button( primary)?" href="#([\w-]+)">([^<]+)</a>', bar(page))
    assert links == [
        (" primary", "editor-arguments", "Change the edit"),
        ("", "edit-comment", "Approve the edit anyway"),
    ]
    assert as_reviewer.post(decide_url(op), form_fields(page, "edit-form")).status_code == 302
