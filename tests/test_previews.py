"""Reviewers see the effect, not just the arguments: a file's change as a diff, a
transfer as balances before and after, read from the live target; the preview a reviewer
decided on is stored with the decision (its hash in the checkpoint, its bytes an
artifact of the run), and a decision on a preview the target has moved past is refused."""

import json
import zipfile

import pytest

from runs.actions.files import workspace_of
from runs.actions.previews import MAX_LINES
from runs.canonical import sha256_hex
from runs.errors import PreviewChanged
from runs.models import Account, CheckpointArtifact, Decision, Operation
from runs.services.previews import MEDIA_TYPE, preview_hash, preview_of
from runs.services.runs import append_message
from tests.conftest import AGENT, http_arguments
from tests.helpers import blob, decide_on, page_of, post_decision, shown, stored
from tests.test_verify_evidence import rewrite, verify

# The next and the previous operation waiting for the reviewer (each looked for after
# it, then round from the other end: the keys, then the rows), its lane's pauses by the
# workers' breakers and, as it is approved, by an operator, and the same call made
# earlier in its run, included.
QUERIES = 19


def write(propose, path: str, content: str, expected: str | None, call_id: str = "w-1"):
    arguments = {"path": path, "content": content, "expected_sha256": expected}
    return propose(call_id, action="file.write", arguments=arguments, rollback_kind="in_band")


@pytest.fixture
def readme(project):
    path = workspace_of(project) / "README.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# Project\n\nRun bin/setup.\n")
    return path


def test_a_new_file_is_shown_whole(propose):
    op = write(propose, "notes/today.md", "hello\nworld\n", None)
    assert preview_of(op) == {
        "kind": "file",
        "path": "notes/today.md",
        "state": "new",
        "as_expected": True,
        "lines": [["+", "hello"], ["+", "world"]],
        "folded": 0,
        "before": "",
        "after": "",
        "replaced": "",
    }


def test_a_changed_file_is_shown_as_a_diff(propose, readme):
    expected = sha256_hex(readme.read_bytes())
    op = write(propose, "README.md", "# Project\n\nRun bin/demo.\n", expected)
    preview = preview_of(op)
    assert (preview["state"], preview["as_expected"]) == ("changed", True)
    assert preview["lines"] == [
        ["@", "@@ -1,3 +1,3 @@"],
        [" ", "# Project"],
        [" ", ""],
        ["-", "Run bin/setup."],
        ["+", "Run bin/demo."],
    ]


def test_a_file_changed_since_the_proposal_says_so(propose, readme):
    op = write(propose, "README.md", "# Project\n", "0" * 64)
    assert preview_of(op)["as_expected"] is False


def test_a_binary_file_is_described_not_shown(propose, readme):
    readme.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    op = write(propose, "README.md", "text\n", sha256_hex(readme.read_bytes()))
    preview = preview_of(op)
    assert preview["state"] == "binary"
    assert preview["before"].startswith("10 bytes, sha256 ")
    assert preview["lines"] == [["+", "text"]]


def test_a_long_change_is_folded(propose):
    content = "".join(f"line {n}\n" for n in range(MAX_LINES + 25))
    preview = preview_of(write(propose, "long.txt", content, None))
    assert (len(preview["lines"]), preview["folded"]) == (MAX_LINES, 25)


def transfer(propose, amount: int, floor: int | None = None):
    arguments = {"from": "A", "to": "B", "amount": amount}
    if floor is not None:
        arguments["require_balance_above"] = floor
    return propose(f"pay-{amount}", arguments=arguments)


def test_a_transfer_shows_both_balances_before_and_after(propose, accounts):
    assert preview_of(transfer(propose, 100, floor=1000)) == {
        "kind": "balances",
        "rows": [
            {"account": "A", "before": "5000.00", "after": "4900.00"},
            {"account": "B", "before": "0.00", "after": "100.00"},
        ],
        "floor": "1000",
        "holds": True,
        "why": "",
    }


def test_a_transfer_that_could_not_be_made_now_says_why(propose, accounts):
    preview = preview_of(transfer(propose, 600, floor=5000))
    assert (preview["holds"], preview["why"]) == (False, "A holds 5,000.00, not more than 5,000.00")
    Account.objects.filter(name="B").delete()
    assert preview_of(transfer(propose, 1)) | {"rows": []} == {
        "kind": "balances",
        "rows": [],
        "floor": None,
        "holds": False,
        "why": "there is no account 'B' in this project",
    }


def test_the_decision_keeps_the_preview_its_reviewer_was_shown(client, reviewer, propose, readme):
    op = write(
        propose, "README.md", "# Project\n\nRun bin/demo.\n", sha256_hex(readme.read_bytes())
    )
    client.force_login(reviewer)
    assert post_decision(client, op).status_code == 302

    decision = Decision.objects.get(operation=op)
    preview = preview_of(op)
    assert decision.preview_sha256 == preview_hash(preview)
    kept = CheckpointArtifact.objects.get(
        checkpoint__operation=op, checkpoint__to_status="approved"
    )
    assert (kept.name, kept.media_type) == (f"previews/operation-{op.pk}.json", MEDIA_TYPE)
    assert json.loads(blob(kept.artifact).read_bytes()) == preview
    assert kept.checkpoint.state["decision"]["preview_sha256"] == decision.preview_sha256

    # Once decided, the page shows the preview as the reviewer was shown it, even if
    # the file has changed since.
    readme.write_text("something else\n")
    page = client.get(page_of(op)).text
    assert "As reviewer was shown it when deciding" in page
    assert "Run bin/demo." in page


def test_a_decision_on_a_preview_the_target_moved_past_is_refused(
    client, reviewer, propose, readme
):
    op = write(
        propose, "README.md", "# Project\n\nRun bin/demo.\n", sha256_hex(readme.read_bytes())
    )
    client.force_login(reviewer)
    seen = shown(client, op)
    readme.write_text("# Project\n\nRun bin/setup && bin/test.\n")
    before = stored()

    response = client.post(
        page_of(op) + "decide/", {"kind": "approve", "arguments_hash": op.arguments_hash, **seen}
    )
    assert response.status_code == 400
    assert "What it would change is different from what you saw." in response.text
    assert stored() == before
    # The page shows the target as it is now, and its forms are bound to that.
    assert "Run bin/setup &amp;&amp; bin/test." in response.text
    assert shown(client, op) != seen
    assert post_decision(client, op).status_code == 302


def test_the_services_refuse_a_stale_preview_too(reviewer, propose, accounts):
    op = transfer(propose, 100)
    seen = preview_hash(preview_of(op))
    Account.objects.filter(name="A").update(balance=50)
    with pytest.raises(PreviewChanged):
        decide_on(op, reviewer, preview_hash=seen)
    op.refresh_from_db()
    assert op.status == Operation.Status.PROPOSED


def test_agent_text_in_a_diff_is_escaped(client, reviewer, propose):
    op = write(propose, "x.html", '<script>alert("x")</script>\n', None)
    client.force_login(reviewer)
    page = client.get(page_of(op)).text
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page


def test_an_email_shows_as_its_recipients_read_it(settings, propose):
    settings.OVERSIGHT_EMAIL_ALLOWED_DOMAINS = ["example.com"]
    arguments = {
        "to": ["ana@example.com", "bo@Example.com", "cy@elsewhere.org"],
        "subject": "June report",
        "body": "<b>All green.</b>",
    }
    op = propose("mail-1", action="email.send", arguments=arguments, rollback_kind="out_of_band")
    assert preview_of(op) == {
        "kind": "message",
        "headers": [
            ["From", settings.DEFAULT_FROM_EMAIL],
            ["To", "ana@example.com, bo@Example.com, cy@elsewhere.org"],
            ["Subject", "June report"],
        ],
        "recipients": {
            "elsewhere.org": ["cy@elsewhere.org"],
            "example.com": ["ana@example.com", "bo@Example.com"],
        },
        "refused": ["bo@Example.com", "cy@elsewhere.org"],
        "body": "<b>All green.</b>",
    }


def test_an_http_call_shows_the_request_and_the_resource_now_and_after(propose, target):
    arguments = http_arguments(target.base, compensate=True)
    op = propose("put-1", action="http.request", arguments=arguments, rollback_kind="compensating")
    preview = preview_of(op)
    assert preview["headers"][0] == ["Idempotency-Key", op.idempotency_key]
    assert (preview["method"], preview["url"], preview["body"]) == (
        "PUT",
        f"{target.base}/items/x",
        '{\n  "colour": "green"\n}',
    )
    assert preview["now"] == f"GET {target.base}/items/x answers 404"
    assert preview["fields"] == [{"field": "colour", "now": "null", "after": '"green"'}]
    assert preview["compensation"] == f"DELETE {target.base}/items/x"


def test_an_unreachable_resource_is_said_so_in_the_preview(settings, propose):
    settings.OVERSIGHT_HTTP_ALLOWED_HOSTS = ["127.0.0.1:9"]
    arguments = http_arguments("http://127.0.0.1:9")
    op = propose("put-2", action="http.request", arguments=arguments, rollback_kind="out_of_band")
    assert preview_of(op)["now"] == (
        "GET http://127.0.0.1:9/items/x: the target refused the connection"
    )


def test_the_evidence_bundle_holds_each_decision_s_preview_and_checks_it(
    client, reviewer, auditor, propose, accounts, run, tmp_path
):
    op = transfer(propose, 100)
    client.force_login(reviewer)
    assert post_decision(client, op).status_code == 302
    seen = Decision.objects.get(operation=op).preview_sha256
    client.force_login(auditor)
    path = tmp_path / "evidence.zip"
    path.write_bytes(b"".join(client.get(f"/audit/runs/{run.pk}/evidence.zip").streaming_content))

    evidence = json.loads(zipfile.ZipFile(path).read("evidence.json"))
    decided = evidence["operations"][0]["decisions"][0]
    assert decided["shown_preview_sha256"] == seen
    kept = json.loads(zipfile.ZipFile(path).read(f"artifacts/{seen}"))
    assert kept["rows"][0] == {"account": "A", "before": "5000.00", "after": "4900.00"}
    assert verify(path)[0] == 0

    rewrite(path, lambda evidence, files: files.update({f"artifacts/{seen}": b"{}"}))
    code, _, err = verify(path)
    assert code == 1
    assert f"{seen}" in err and "does not match its sha256" in err


@pytest.mark.parametrize("messages", [1, 30])
def test_the_operation_page_takes_a_fixed_number_of_queries(
    client, reviewer, reviewer2, propose, accounts, run, messages, django_assert_num_queries
):
    """As many queries with one message in the run as with thirty, the preview's read
    of the accounts included."""
    for n in range(messages):
        append_message(run=run, kind="agent", payload={"text": f"step {n}"}, actor=AGENT)
    op = transfer(propose, 100)
    decide_on(op, reviewer2)  # the first of two approvals a policy may ask for
    client.force_login(reviewer)
    client.get(page_of(op))  # the first visit stores the time zone in the session
    with django_assert_num_queries(QUERIES):
        assert client.get(page_of(op)).status_code == 200


def test_a_kept_preview_whose_bytes_were_changed_is_not_shown_and_the_page_still_opens(
    client, reviewer, propose, readme
):
    op = write(
        propose, "README.md", "# Project\n\nRun bin/demo.\n", sha256_hex(readme.read_bytes())
    )
    client.force_login(reviewer)
    assert post_decision(client, op).status_code == 302
    kept = CheckpointArtifact.objects.get(
        checkpoint__operation=op, checkpoint__to_status="approved"
    )
    blob(kept.artifact).write_text('{"kind": "forged"}')

    response = client.get(page_of(op))

    assert response.status_code == 200
    assert "forged" not in response.text
    assert "As reviewer was shown it when deciding" not in response.text
