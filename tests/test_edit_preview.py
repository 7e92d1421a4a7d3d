"""An edit is approved on the effect of the edited arguments: the reviewer edits, sees
what the edited operation would change (read from the target then), and approves that.
The preview kept and hashed with the decision is the one of the arguments approved, the
page shows it afterwards, and the evidence bundle carries it and checks it."""

import html
import json
import re
import zipfile

import pytest
from django.test import Client

from runs.canonical import canonical_json, sha256_hex
from runs.errors import PreviewChanged
from runs.models import CheckpointArtifact, Decision, Operation
from runs.preview_changes import digest
from runs.services.previews import preview_hash, preview_of, stored_preview
from tests.helpers import blob, decide_on, page_of, refused, stored
from tests.test_previews import readme, write  # noqa: F401 (a fixture)
from tests.test_verify_evidence import rewrite, verify

ADDED = "Then run bin/test."
PROPOSED = "# Project\n\nRun bin/demo.\n"
EDITED = PROPOSED + ADDED + "\n"


@pytest.fixture
def op(propose, readme) -> Operation:  # noqa: F811 (the fixture, imported)
    """A README rewrite; its edit below adds a line."""
    return write(propose, "README.md", PROPOSED, sha256_hex(readme.read_bytes()))


@pytest.fixture
def as_reviewer(client, reviewer) -> Client:
    client.force_login(reviewer)
    return client


def edited(op: Operation) -> dict:
    return {**op.arguments, "content": EDITED}


def post_edit(client: Client, op: Operation, arguments: str, **fields):
    """The first step, as the editor on the page sends it."""
    data = {"arguments_hash": op.arguments_hash, "arguments": arguments, **fields}
    return client.post(f"{page_of(op)}edit/", data)


def approval_form(page: str) -> dict:
    """The fields of the form that approves the edit, as the page renders them."""
    form = re.search(r'<form [^>]*class="decision decision-edit.*?</form>', page, re.S)
    fields = re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', form[0])
    return {name: html.unescape(value) for name, value in fields}


def preview_shown(page: str) -> str:
    return re.search(r'<section class="card preview.*?</section>', page, re.S)[0]


def field_errors(page: str) -> list[str]:
    return re.findall(r'<p class="error field-error" role="alert">(.*?)</p>', page)


# --- The service ---------------------------------------------------------------------------


def test_an_edit_keeps_the_preview_of_the_edited_arguments(reviewer, op):
    shown = preview_of(op, edited(op))
    assert ["+", ADDED] in shown["lines"]

    decision = decide_on(
        op, reviewer, "edit", arguments=edited(op), preview_hash=preview_hash(shown)
    )

    assert decision.preview_sha256 == preview_hash(shown)
    assert stored_preview(decision.preview_sha256) == shown
    kept = CheckpointArtifact.objects.get(checkpoint__operation=op, name__startswith="previews/")
    assert kept.name == f"previews/operation-{op.pk}.json"
    assert json.loads(blob(kept.artifact).read_bytes()) == shown
    assert (op.status, op.arguments["content"]) == (Operation.Status.APPROVED, EDITED)


def test_an_edit_approved_on_the_original_preview_is_refused(reviewer, op):
    original = preview_hash(preview_of(op))

    with refused(PreviewChanged):
        decide_on(op, reviewer, "edit", arguments=edited(op), preview_hash=original)

    assert op.arguments["content"] == PROPOSED


# --- The page: edit, see its effect, approve -----------------------------------------------


def test_previewing_an_edit_shows_its_effect_and_records_nothing(as_reviewer, op):
    before = stored()

    response = post_edit(as_reviewer, op, json.dumps(edited(op), indent=2))

    assert response.status_code == 200
    page = response.text
    assert stored() == before
    assert "<title>Your edit: file.write" in page
    preview = preview_shown(page)
    assert "What it would change with your edit" in preview
    assert f'<span class="add">+ {ADDED}</span>' in preview
    changes = re.search(
        r'role="figure" aria-label="Your changes to the arguments">(.*?)</pre>', page, re.S
    )[1]
    assert re.findall(r'<span class="add">(.*?)</span>', changes) == [
        "+   &quot;content&quot;: &quot;# Project\\n\\nRun bin/demo.\\nThen run bin/test.\\n&quot;,"
    ]
    form = approval_form(page)
    assert form.pop("csrfmiddlewaretoken")
    assert form == {
        "kind": "edit",
        "arguments_hash": op.arguments_hash,
        "preview_hash": preview_hash(preview_of(op, edited(op))),
        "arguments": json.dumps(edited(op), indent=2, sort_keys=True),
        "seen": digest(preview_of(op, edited(op))),
    }
    assert "Approve the edited arguments" in page
    assert "Change the edit" in page
    assert f'<a href="{page_of(op)}">Back to the operation without editing</a>' in page


def test_approving_the_previewed_edit_keeps_what_was_shown(as_reviewer, reviewer, op):
    page = post_edit(as_reviewer, op, json.dumps(edited(op))).text

    response = as_reviewer.post(f"{page_of(op)}decide/", approval_form(page))

    assert response.status_code == 302
    op.refresh_from_db()
    assert (op.status, op.arguments["content"]) == (Operation.Status.APPROVED, EDITED)
    decision = op.decisions.get()
    assert (decision.kind, decision.reviewer) == (Decision.Kind.EDIT, reviewer)
    assert stored_preview(decision.preview_sha256) == preview_of(op)
    preview = preview_shown(as_reviewer.get(page_of(op)).text)
    assert "As reviewer was shown it when deciding" in preview
    assert f'<span class="add">+ {ADDED}</span>' in preview


def test_an_edit_left_as_it_is_is_an_approval(as_reviewer, op):
    page = post_edit(as_reviewer, op, json.dumps(op.arguments)).text
    assert "Your edit leaves the arguments as they are: approving it approves them." in page

    assert as_reviewer.post(f"{page_of(op)}decide/", approval_form(page)).status_code == 302
    assert op.decisions.get().kind == Decision.Kind.APPROVE


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ('{"path": "README.md",', "Not valid JSON: "),
        ('["README.md"]', "The arguments must be a JSON object."),
        ('{"path": "README.md"}', "arguments.content: Field required"),
    ],
)
def test_an_edit_the_action_refuses_is_shown_with_the_reason(as_reviewer, op, arguments, reason):
    before = stored()

    response = post_edit(as_reviewer, op, arguments)

    assert response.status_code == 400
    assert any(error.startswith(reason) for error in field_errors(response.text))
    assert html.escape(arguments, quote=True) in response.text  # The reviewer's text is kept.
    assert 'aria-invalid="true"' in response.text
    assert "Approve the edited arguments" not in response.text
    assert stored() == before


def test_an_edit_of_arguments_that_changed_since_is_refused(as_reviewer, op):
    before = stored()

    response = post_edit(as_reviewer, op, json.dumps(edited(op)), arguments_hash="0" * 64)

    assert response.status_code == 400
    assert "has other arguments than the ones you edited: look again." in response.text
    assert stored() == before
    # Sent again from that page, it is previewed against the arguments shown there.
    again = re.search(r'name="arguments_hash" value="(\w+)" id="editor-', response.text)[1]
    assert again == op.arguments_hash


def test_an_edit_approved_on_a_moved_target_is_shown_again(as_reviewer, op, readme):  # noqa: F811
    page = post_edit(as_reviewer, op, json.dumps(edited(op))).text
    readme.write_text("# Project\n\nRun bin/setup && bin/lint.\n")
    before = stored()

    response = as_reviewer.post(f"{page_of(op)}decide/", approval_form(page))

    assert response.status_code == 400
    assert "The file README.md changed since you looked: it is no longer" in response.text
    assert stored() == before
    # The edit's effect as it is now, and its approval bound to that.
    assert "Run bin/setup &amp;&amp; bin/lint." in preview_shown(response.text)
    form = approval_form(response.text)
    assert form["preview_hash"] == preview_hash(preview_of(op, edited(op)))
    assert as_reviewer.post(f"{page_of(op)}decide/", form).status_code == 302


def test_an_irreversible_edit_is_confirmed_when_approved(as_reviewer, propose):
    email = {"to": ["ops@example.com"], "subject": "Report", "body": "All green."}
    mail = propose("mail", action="email.send", arguments=email, rollback_kind="out_of_band")
    page = post_edit(as_reviewer, mail, json.dumps({**email, "body": "All green. Ask us."})).text
    assert "Type <code>email.send</code> to confirm" in page

    refused_page = as_reviewer.post(f"{page_of(mail)}decide/", approval_form(page))
    assert refused_page.status_code == 400
    assert "This cannot be undone: type email.send to confirm." in field_errors(refused_page.text)
    assert "Approve the edited arguments" in refused_page.text

    form = {**approval_form(refused_page.text), "confirm": "email.send"}
    assert as_reviewer.post(f"{page_of(mail)}decide/", form).status_code == 302
    mail.refresh_from_db()
    assert mail.arguments["body"] == "All green. Ask us."


# --- Who may, and how ----------------------------------------------------------------------


def test_previewing_an_edit_is_a_post(as_reviewer, op):
    assert as_reviewer.get(f"{page_of(op)}edit/").status_code == 405


@pytest.mark.parametrize(("role", "status"), [("auditor", 403), ("outsider", 404)])
def test_previewing_an_edit_needs_the_decide_permission(client, request, op, role, status):
    client.force_login(request.getfixturevalue(role))

    response = post_edit(client, op, json.dumps(edited(op)))

    assert response.status_code == status
    assert "Approve the edited arguments" not in response.text


def test_previewing_an_edit_needs_the_csrf_token(reviewer, op):
    client = Client(enforce_csrf_checks=True)
    client.force_login(reviewer)
    assert post_edit(client, op, json.dumps(edited(op))).status_code == 403

    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', client.get(page_of(op)).text)
    response = post_edit(client, op, json.dumps(edited(op)), csrfmiddlewaretoken=token[1])
    assert response.status_code == 200


# --- The evidence --------------------------------------------------------------------------


@pytest.fixture
def bundle(client, reviewer, auditor, op, run, tmp_path):
    """The bundle of the run once reviewer edited and approved ``op`` in the page; and
    the preview of the arguments as proposed, which they were not shown when approving."""
    original = preview_of(op)
    client.force_login(reviewer)
    page = post_edit(client, op, json.dumps(edited(op))).text
    assert client.post(f"{page_of(op)}decide/", approval_form(page)).status_code == 302
    client.force_login(auditor)
    path = tmp_path / "evidence.zip"
    path.write_bytes(b"".join(client.get(f"/audit/runs/{run.pk}/evidence.zip").streaming_content))
    return path, original


def test_the_bundle_carries_the_preview_of_the_edit_and_verifies(bundle):
    path, _ = bundle
    archive = zipfile.ZipFile(path)
    decision = json.loads(archive.read("evidence.json"))["operations"][0]["decisions"][0]
    assert decision["kind"] == "edit"
    kept = json.loads(archive.read(f"artifacts/{decision['shown_preview_sha256']}"))
    assert ["+", ADDED] in kept["lines"]
    code, _, err = verify(path)
    assert (code, err) == (0, "")


def swap_everything(original: bytes):
    """The original preview in place of the edit's: its file, listing and decision."""

    def change(evidence, files):
        sha = sha256_hex(original)
        decision = evidence["operations"][0]["decisions"][0]
        files.pop(f"artifacts/{decision['shown_preview_sha256']}")
        files[f"artifacts/{sha}"] = original
        for item in evidence["artifacts"]:
            if item["sha256"] == decision["shown_preview_sha256"]:
                item.update(sha256=sha, file=f"artifacts/{sha}")
        decision["shown_preview_sha256"] = sha

    return change


def swap_the_listing(original: bytes):
    """The original preview listed in place of the edit's; the decision left alone."""

    def change(evidence, files):
        sha = sha256_hex(original)
        files[f"artifacts/{sha}"] = original
        for item in evidence["artifacts"]:
            if item["name"].startswith("previews/"):
                item.update(sha256=sha, file=f"artifacts/{sha}")

    return change


def swap_the_decision(original: bytes, keep_id: bool = True):
    """The decision said to have been shown the original preview, added to the bundle."""

    def change(evidence, files):
        sha = sha256_hex(original)
        files[f"artifacts/{sha}"] = original
        decision = evidence["operations"][0]["decisions"][0]
        decision["shown_preview_sha256"] = sha
        if not keep_id:
            del decision["id"]

    return change


@pytest.mark.parametrize(
    ("swap", "named"),
    [
        (swap_everything, "the preview reviewer was shown is not the one the chain records"),
        (swap_the_listing, "records another version than artifacts/"),
        (swap_the_decision, "the preview reviewer was shown is not the one the chain records"),
        (
            lambda original: swap_the_decision(original, keep_id=False),
            "the preview reviewer was shown is not the one the chain records",
        ),
    ],
)
def test_a_bundle_with_the_original_preview_swapped_in_fails(bundle, swap, named):
    path, original = bundle
    rewrite(path, swap(canonical_json(original)))

    code, out, err = verify(path)

    assert (code, out) == (1, "")
    assert named in err


def test_a_bundle_made_before_decisions_carried_their_id_still_verifies(bundle):
    path, _ = bundle

    def without_ids(evidence, files):
        for operation in evidence["operations"]:
            for decision in operation["decisions"]:
                del decision["id"]

    rewrite(path, without_ids)
    assert verify(path)[0] == 0
