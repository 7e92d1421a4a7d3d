"""The auditor's pages: one checkpoint with its diff, a run's chain and artifacts, the
"Verify chain" button, artifact versions, the exports, the evidence bundle; that
auditors can change nothing; and that user text stays text."""

import csv
import hashlib
import html
import io
import json
import re
import zipfile

import pytest
from django.test import Client
from django.urls import get_resolver, reverse

from runs.actors import Actor
from runs.audit.diff import Change, DiffLine, state_diff, text_diff
from runs.audit.search import SORTS, encode_cursor
from runs.engine.worker import Worker
from runs.models import (
    AgentToken,
    Alert,
    Checkpoint,
    CheckpointArtifact,
    Decision,
    Run,
    WebhookDelivery,
    WebhookEndpoint,
)
from runs.payloads import MessageKind
from runs.services.alerts import acknowledge_alert, resolve_alert
from runs.services.artifacts import attach_artifact
from runs.services.proposals import propose_operation
from runs.services.requests import ask
from runs.services.runs import append_message, open_session, start_run
from runs.services.tokens import issue_token
from tests.conftest import AGENT
from tests.helpers import blob, decide_on, stored
from tests.webhook_receivers import endpoint_with_delivery

HTMX = {"HX-Request": "true"}
TRANSFER = {"from": "A", "to": "B", "amount": "100.00"}
REPORT_V1 = b"alpha\nbeta\ngamma\n"
REPORT_V2 = b"alpha\nBETA\ngamma\ndelta\n"
XSS = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


@pytest.fixture
def story(run, propose, reviewer, accounts) -> Run:
    """The run fixture's history: a message, a report in two versions and a CSV, a
    transfer reviewer rejects and one reviewer approves that a worker executes."""
    append_message(
        run=run, kind=MessageKind.AGENT, payload={"text": "Looking up the invoice"}, actor=AGENT
    )
    attach_artifact(run=run, name="report.txt", content=REPORT_V1, actor=AGENT)
    refused = propose("refused")
    decide_on(refused, reviewer, Decision.Kind.REJECT, comment="Not this supplier")
    paid = propose("paid", arguments=TRANSFER)
    decide_on(paid, reviewer, comment="Invoice matches the PO")
    Worker("test-worker").drain()
    attach_artifact(run=run, name="report.txt", content=REPORT_V2, actor=AGENT)
    attach_artifact(run=run, name="data.csv", content=b"a,b\n1,2\n", actor=AGENT)
    run.refresh_from_db()
    return run


@pytest.fixture
def as_auditor(client, auditor) -> Client:
    client.force_login(auditor)
    return client


def at(run: Run, **lookup) -> Checkpoint:
    """The run's first checkpoint matching ``lookup``."""
    return run.checkpoints.filter(**lookup).order_by("seq").first()


def versions(run: Run, name: str) -> list[CheckpointArtifact]:
    return list(
        CheckpointArtifact.objects.filter(checkpoint__run=run, name=name)
        .select_related("artifact", "checkpoint")
        .order_by("checkpoint__seq")
    )


def page(client: Client, url: str, status: int = 200, **kwargs) -> str:
    response = client.get(url, **kwargs)
    assert response.status_code == status
    return response.text


def diff_row(kind: str, path: str, before=None, after=None) -> str:
    """One row of the checkpoint page's "What changed" table."""
    cells = [
        f'<code class="del">{html.escape(json.dumps(before))}</code>' if kind != "added" else "",
        f'<code class="add">{html.escape(json.dumps(after))}</code>' if kind != "removed" else "",
    ]
    return (
        f'<tr class="change-{kind}"><td><code>{path}</code></td><td>{kind}</td>'
        f"<td>{cells[0]}</td><td>{cells[1]}</td></tr>"
    )


def pretty(value) -> str:
    """JSON as the pages show it (escaped)."""
    return html.escape(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


# --- One checkpoint --------------------------------------------------------------------


def test_checkpoint_page_shows_a_decision_with_its_observation(as_auditor, story):
    rejected = at(story, to_status="rejected")
    operation = rejected.operation

    text = page(as_auditor, f"/audit/checkpoints/{rejected.pk}/")

    assert (
        '<code>operation.status</code>: proposed → <span class="status status-rejected">'
        "rejected</span>"
    ) in text
    assert "<dt>Actor</dt><dd>user <strong>reviewer</strong></dd>" in text
    assert "<dt>Reason</dt><dd>Not this supplier</dd>" in text
    assert (
        f"reject by <strong>reviewer</strong> on arguments "
        f"<code>{operation.arguments_hash[:19]}…</code>: “Not this supplier”"
    ) in text
    assert pretty({"decision": "rejected", "reason": "Not this supplier"}) in text
    assert "<code>ledger.transfer</code>" in text
    assert f'<code class="hash">{rejected.hash}</code> <span class="chain-ok">' in text
    assert pretty(rejected.state) in text


def test_checkpoint_page_shows_the_workers_observation(as_auditor, story):
    committed = at(story, to_status="committed")

    text = page(as_auditor, f"/audit/checkpoints/{committed.pk}/")

    assert "worker <strong>test-worker</strong>" in text
    assert "<dt>Reason</dt><dd>executed and verified</dd>" in text
    assert pretty(committed.state["observation"]) in text
    assert "&quot;verified&quot;: true" in text


def test_checkpoint_page_lists_the_artifacts_it_introduced_with_their_hashes(as_auditor, story):
    first, second = versions(story, "report.txt")

    text = page(as_auditor, f"/audit/checkpoints/{second.checkpoint_id}/")
    introduced = text[text.index("Artifacts introduced here") :].split("</section>")[0]

    assert re.findall(r'<a href="/audit/artifacts/(\d+)/"><code>([^<]+)</code>', introduced) == [
        (str(second.pk), "report.txt")
    ]
    assert f'<code class="hash">sha256 {hashlib.sha256(REPORT_V2).hexdigest()}</code>' in introduced
    path = "artifacts.report.txt.sha256"
    assert diff_row("changed", path, first.artifact.sha256, second.artifact.sha256) in text


def test_checkpoint_page_links_its_neighbours_in_the_chain(as_auditor, story):
    chain = list(story.checkpoints.order_by("seq"))
    first, middle, last = chain[0], chain[4], chain[-1]

    middle_page = page(as_auditor, f"/audit/checkpoints/{middle.pk}/")
    first_page = page(as_auditor, f"/audit/checkpoints/{first.pk}/")
    last_page = page(as_auditor, f"/audit/checkpoints/{last.pk}/")

    assert (
        f'<a href="/audit/checkpoints/{chain[3].pk}/" rel="prev">← Checkpoint 4</a>' in middle_page
    )
    assert (
        f'<a href="/audit/checkpoints/{chain[5].pk}/" rel="next">Checkpoint 6 →</a>' in middle_page
    )
    assert "First checkpoint" in first_page and 'rel="prev"' not in first_page
    assert "links to the start" in first_page
    assert "Latest checkpoint" in last_page and 'rel="next"' not in last_page


def test_diff_against_the_previous_checkpoint_shows_what_changed(as_auditor, story):
    waiting = at(story, event="run.status", to_status="waiting")

    text = page(as_auditor, f"/audit/checkpoints/{waiting.pk}/")

    assert f"What changed since checkpoint {waiting.seq - 1}" in text
    assert diff_row("changed", "run.status", "running", "waiting") in text
    assert diff_row("changed", "run.reason", "", "approval") in text
    assert diff_row("changed", "run.version", waiting.seq - 1, waiting.seq) in text
    assert "<code>run.cancel_requested</code>" not in text  # unchanged


def test_diff_against_another_checkpoint_of_the_run(as_auditor, story):
    waiting = at(story, event="run.status", to_status="waiting")

    text = page(as_auditor, f"/audit/checkpoints/{waiting.pk}/?against=1")

    assert "What changed since checkpoint 1" in text
    assert diff_row("changed", "run.status", "queued", "waiting") in text
    assert diff_row("removed", "goal", before="Pay the supplier invoice") in text
    assert f'name="against" min="1" max="{story.version}" value="1"' in text


def test_first_checkpoint_shows_its_whole_state_as_added(as_auditor, story):
    text = page(as_auditor, f"/audit/checkpoints/{at(story, seq=1).pk}/")
    assert diff_row("added", "goal", after="Pay the supplier invoice") in text
    assert diff_row("added", "run.status", after="queued") in text


@pytest.mark.parametrize("against", ["0", "99", "abc", "-1", "1.5", "²"])
def test_bad_against_is_refused_with_a_message(as_auditor, story, against):
    waiting = at(story, event="run.status", to_status="waiting")

    text = page(as_auditor, f"/audit/checkpoints/{waiting.pk}/?against={against}", status=400)

    assert (
        f'<p class="error" role="alert">There is no checkpoint {html.escape(against)} in this '
        f"run (1 to {story.version}).</p>"
    ) in text
    assert f"What changed since checkpoint {waiting.seq - 1}" in text


# --- Access ---------------------------------------------------------------------------


@pytest.fixture
def audit_urls(story) -> dict[str, str]:
    """Every audit page of the story, and its artifact download."""
    ref = versions(story, "report.txt")[0]
    return {
        "checkpoint": f"/audit/checkpoints/{at(story, seq=1).pk}/",
        "run": f"/audit/runs/{story.pk}/",
        "verify": f"/audit/runs/{story.pk}/verify/",
        "evidence": f"/audit/runs/{story.pk}/evidence.zip",
        "artifact": f"/audit/artifacts/{ref.pk}/",
        "download": f"/runs/{story.pk}/artifacts/{ref.pk}/",
    }


def test_other_projects_audit_pages_are_not_found(client, outsider, audit_urls):
    client.force_login(outsider)
    for url in audit_urls.values():
        assert client.get(url).status_code == 404, url


def test_anonymous_is_sent_to_login(client, audit_urls):
    for url in [*audit_urls.values(), "/audit/", "/audit/export.csv", "/audit/export.jsonl"]:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(f"/accounts/login/?next={url}"), url


# --- A run's history ---------------------------------------------------------------------


def test_run_audit_page_lists_every_checkpoint_in_order(as_auditor, story):
    text = page(as_auditor, f"/audit/runs/{story.pk}/")

    listed = re.findall(r'<a href="/audit/checkpoints/(\d+)/">#(\d+)</a>', text)
    assert [(int(pk), int(seq)) for pk, seq in listed] == list(
        story.checkpoints.order_by("seq").values_list("pk", "seq")
    )
    assert '<p class="goal">Pay the supplier invoice</p>' in text
    assert "Not this supplier" in text


def test_a_long_run_lists_its_first_checkpoints_and_links_to_all(as_auditor, story, monkeypatch):
    monkeypatch.setattr("runs.views.audit.RUN_PAGE_CHECKPOINTS", 3)

    text = page(as_auditor, f"/audit/runs/{story.pk}/")

    listed = re.findall(r'<a href="/audit/checkpoints/\d+/">#(\d+)</a>', text)
    assert listed == ["1", "2", "3"]
    assert f"the first 3 of {story.version}" in text
    assert f'href="/audit/?run={story.pk}&amp;sort=run"' in text


def test_run_audit_page_groups_artifacts_by_name_with_their_versions(as_auditor, story):
    text = page(as_auditor, f"/audit/runs/{story.pk}/")

    groups = re.findall(
        r"<h3><code>([^<]+)</code></h3>\s*<ol class=\"versions\">(.*?)</ol>", text, re.S
    )
    shown = {
        name: re.findall(r'<a href="/audit/artifacts/(\d+)/">Version (\d+)</a>', block)
        for name, block in groups
    }
    assert shown == {
        name: [(str(ref.pk), str(n)) for n, ref in enumerate(versions(story, name), 1)]
        for name in ["data.csv", "report.txt"]
    }
    assert [name for name, _ in groups] == ["data.csv", "report.txt"]


def test_verify_chain_says_the_chain_holds(as_auditor, story):
    whole = page(as_auditor, f"/audit/runs/{story.pk}/verify/")
    fragment = page(as_auditor, f"/audit/runs/{story.pk}/verify/", headers=HTMX)

    for text in (whole, fragment):
        assert "<strong>The chain holds.</strong>" in text
        assert f"up to version {story.version}." in text
    assert "<h1>" in whole
    assert fragment.strip().startswith('<div id="chain-result" role="status">')
    assert "<h1>" not in fragment and "<html" not in fragment
    assert "The chain holds." not in page(as_auditor, f"/audit/runs/{story.pk}/")


def test_verify_chain_names_the_checkpoint_edited_behind_the_applications_back(as_auditor, story):
    forged = at(story, to_status="rejected")
    Checkpoint.objects.filter(pk=forged.pk).update(reason="forged")
    broken = (
        f"<strong>The chain is broken</strong> at run {story.pk}, seq {forged.seq} "
        f"(checkpoint {forged.pk}): content does not match its hash (edited)."
    )

    whole = page(as_auditor, f"/audit/runs/{story.pk}/verify/")
    fragment = page(as_auditor, f"/audit/runs/{story.pk}/verify/", headers=HTMX)

    assert broken in whole and broken in fragment
    assert "The chain holds." not in whole + fragment
    checkpoint_page = page(as_auditor, f"/audit/checkpoints/{forged.pk}/")
    assert '<strong class="chain-broken">does not match its content</strong>' in checkpoint_page


# --- Artifact versions -----------------------------------------------------------------


def test_artifact_version_is_verified_and_shown_as_text(as_auditor, story):
    first = versions(story, "report.txt")[0]

    text = page(as_auditor, f"/audit/artifacts/{first.pk}/")

    assert f'<code class="hash">{hashlib.sha256(REPORT_V1).hexdigest()}</code>' in text
    assert "verified against the stored bytes just now" in text
    assert '<pre class="code">alpha\nbeta\ngamma\n</pre>' in text
    assert f"{len(REPORT_V1)} bytes · text/plain" in text


def test_artifact_whose_bytes_were_overwritten_does_not_verify(as_auditor, story):
    first = versions(story, "report.txt")[0]
    blob(first.artifact).write_bytes(b"alpha\nomega\ngamma\n")

    text = page(as_auditor, f"/audit/artifacts/{first.pk}/")

    assert "does NOT match the stored bytes" in text
    assert "verified against the stored bytes" not in text


def test_artifact_whose_bytes_are_missing_says_so(as_auditor, story):
    first, second = versions(story, "report.txt")
    blob(first.artifact).unlink()

    missing = page(as_auditor, f"/audit/artifacts/{first.pk}/")
    compared = page(as_auditor, f"/audit/artifacts/{second.pk}/")

    assert "The stored bytes are missing." in missing
    assert "verified against" not in missing
    assert "verified against the stored bytes just now" in compared
    assert "Only text up to 512 KB is compared" in compared


def test_line_diff_between_two_versions(as_auditor, story):
    first, second = versions(story, "report.txt")

    newer = page(as_auditor, f"/audit/artifacts/{second.pk}/")
    reverse = page(as_auditor, f"/audit/artifacts/{first.pk}/?against={second.pk}")

    assert f"Changes since checkpoint {first.checkpoint.seq}" in newer
    for line in [
        '<span class="same"><span class="ln">1</span><span class="ln">1</span>  alpha</span>',
        '<span class="del"><span class="ln">2</span><span class="ln"></span>- beta</span>',
        '<span class="add"><span class="ln"></span><span class="ln">2</span>+ BETA</span>',
        '<span class="add"><span class="ln"></span><span class="ln">4</span>+ delta</span>',
    ]:
        assert line in newer
    assert f"Changes since checkpoint {second.checkpoint.seq}" in reverse
    assert (
        '<span class="del"><span class="ln">4</span><span class="ln"></span>- delta</span>'
        in reverse
    )
    assert "Changes since" not in page(as_auditor, f"/audit/artifacts/{first.pk}/")


@pytest.mark.parametrize("against", ["another artifact", "x", "²"])
def test_diff_against_anything_but_a_version_of_the_same_artifact_is_not_found(
    as_auditor, story, against
):
    report, data = versions(story, "report.txt")[0], versions(story, "data.csv")[0]
    against = data.pk if against == "another artifact" else against

    assert as_auditor.get(f"/audit/artifacts/{report.pk}/?against={against}").status_code == 404


def test_versions_that_differ_only_in_line_endings_are_not_called_the_same(as_auditor, story):
    attach_artifact(run=story, name="notes.txt", content=b"total: 1\r\n", actor=AGENT)
    attach_artifact(run=story, name="notes.txt", content=b"total: 1\n", actor=AGENT)
    second = versions(story, "notes.txt")[1]

    text = page(as_auditor, f"/audit/artifacts/{second.pk}/")

    assert "The two versions have the same text." not in text


def test_download_returns_the_versions_bytes(as_auditor, story):
    first = versions(story, "report.txt")[0]
    text = page(as_auditor, f"/audit/artifacts/{first.pk}/")
    link = re.search(r'<a class="button" href="([^"]+)">Download this version</a>', text)[1]

    response = as_auditor.get(link)

    assert response.status_code == 200
    assert response["Content-Disposition"] == 'attachment; filename="report.txt"'
    assert b"".join(response.streaming_content) == REPORT_V1


# --- The state and text diffs ------------------------------------------------------------


def test_state_diff_reports_nested_additions_removals_and_changes():
    before = {
        "run": {"status": "running", "version": 3},
        "pending": [{"id": 1, "approved_by": ["ann"]}],
        "gone": {"deep": True},
        "same": [1, 2],
    }
    after = {
        "run": {"status": "waiting", "version": 3},
        "pending": [{"id": 1, "approved_by": ["ann", "bob"]}, {"id": 2, "approved_by": []}],
        "new": {"x": None},
        "same": [1, 2],
    }

    assert state_diff(before, after) == [
        Change("run.status", "changed", "running", "waiting"),
        Change("pending[0].approved_by[1]", "added", after="bob"),
        Change("pending[1].id", "added", after=2),
        Change("pending[1].approved_by", "added", after=[]),
        Change("new.x", "added", after=None),
        Change("gone.deep", "removed", before=True),
    ]
    assert state_diff(after, after) == []


def test_state_diff_of_a_value_replaced_by_an_object():
    assert state_diff({"result": "pending"}, {"result": {"ok": True}}) == [
        Change("result.ok", "added", after=True),
        Change("result", "removed", before="pending"),
    ]


def test_state_diff_reports_a_filled_list_by_its_items_alone():
    before = {"pending": [{"id": 1, "approved_by": []}]}
    after = {"pending": [{"id": 1, "approved_by": ["ann"]}]}

    assert state_diff(before, after) == [Change("pending[0].approved_by[0]", "added", after="ann")]
    assert state_diff(after, before) == [
        Change("pending[0].approved_by[0]", "removed", before="ann")
    ]
    assert state_diff({}, {"a": []}) == [Change("a", "added", after=[])]


def test_state_diff_tells_true_from_one():
    """JSON's true and 1 are different values (Python's True == 1 is not a reason to
    hide the change)."""
    assert state_diff({"confirm": 1}, {"confirm": True}) == [Change("confirm", "changed", 1, True)]


def test_text_diff_numbers_lines_and_separates_hunks():
    before = "".join(f"line {n}\n" for n in range(1, 11))
    after = before.replace("line 2\n", "line two\n").replace("line 9\n", "")

    lines = text_diff(before, after, context=1)

    assert lines == [
        DiffLine("hunk", 1, 1, ""),
        DiffLine("context", 1, 1, "line 1"),
        DiffLine("removed", 2, None, "line 2"),
        DiffLine("added", None, 2, "line two"),
        DiffLine("context", 3, 3, "line 3"),
        DiffLine("hunk", 8, 8, ""),
        DiffLine("context", 8, 8, "line 8"),
        DiffLine("removed", 9, None, "line 9"),
        DiffLine("context", 10, 9, "line 10"),
    ]
    assert text_diff(before, before) == []
    assert text_diff("", "new\n") == [DiffLine("hunk", 1, 1, ""), DiffLine("added", None, 1, "new")]


# --- Evidence bundle ------------------------------------------------------------------


@pytest.fixture
def alerted(story, approved, admin_user) -> Alert:
    """An update the target lies about, with no undo: the worker raises an alert; an
    admin acknowledges it, then resolves it with a note."""
    operation = approved("http-rigged-no-undo")
    Worker("test-worker").drain()
    alert = Alert.objects.get(operation=operation)
    acknowledge_alert(alert=alert, user=admin_user)
    resolve_alert(alert=alert, user=admin_user, note="Set the colour back by hand.")
    return alert


def bundle(client: Client, run: Run) -> tuple[dict, zipfile.ZipFile]:
    response = client.get(f"/audit/runs/{run.pk}/evidence.zip")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/zip"
    assert response["Content-Disposition"].startswith(
        f'attachment; filename="oversight-run-{run.pk}-evidence-'
    )
    # Reading the whole stream closes the response.
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    return json.loads(archive.read("evidence.json")), archive


def test_evidence_bundle_holds_the_whole_run(as_auditor, story, alerted, reviewer):
    run = Run.objects.get(pk=story.pk)

    evidence, archive = bundle(as_auditor, run)

    assert evidence["run"]["goal"] == "Pay the supplier invoice"
    assert evidence["bundle"]["generated_by"] == "auditor"
    assert [m["payload"] for m in evidence["messages"]] == [{"text": "Looking up the invoice"}]
    operations = {op["call_id"]: op for op in evidence["operations"]}
    for operation in run.operations.all():
        shown = operations[operation.call_id]
        assert shown["proposed_arguments"] == operation.proposed_arguments
        assert shown["status"] == operation.status
        assert shown["execution"]["result"] == operation.result
        assert [
            (d["by"], d["kind"], d["comment"], d["shown_arguments_hash"])
            for d in shown["decisions"]
        ] == [
            (d.reviewer.username, d.kind, d.comment, d.arguments_hash)
            for d in operation.decisions.order_by("pk")
        ]
    assert operations["refused"]["decisions"][0]["comment"] == "Not this supplier"
    assert operations["refused"]["decisions"][0]["kind"] == "reject"
    assert operations["paid"]["decisions"][0]["by"] == reviewer.username
    assert operations["paid"]["execution"]["result"]["verified"] is True
    [alert] = evidence["alerts"]
    assert (alert["acknowledged_by"], alert["resolved_by"]) == ("admin", "admin")
    assert alert["resolution_note"] == "Set the colour back by hand."
    assert alert["summary"] == alerted.summary
    assert [(c["seq"], c["prev_hash"], c["hash"]) for c in evidence["checkpoints"]] == list(
        run.checkpoints.order_by("seq").values_list("seq", "prev_hash", "hash")
    )
    assert evidence["chain"] == {
        "verified": True,
        "broken_link": None,
        "head": run.checkpoints.order_by("seq").last().hash,
        "length": run.version,
    }
    shas = {item["sha256"] for item in evidence["artifacts"]}
    assert len(shas) == 3
    for sha in shas:
        assert hashlib.sha256(archive.read(f"artifacts/{sha}")).hexdigest() == sha
    assert evidence["missing_artifacts"] == []


def test_evidence_bundle_of_a_tampered_run_says_the_chain_is_broken(as_auditor, story):
    forged = at(story, to_status="rejected")
    Checkpoint.objects.filter(pk=forged.pk).update(reason="forged")

    evidence, _ = bundle(as_auditor, story)

    assert evidence["chain"]["verified"] is False
    assert f"seq {forged.seq}" in evidence["chain"]["broken_link"]
    assert [c["reason"] for c in evidence["checkpoints"] if c["seq"] == forged.seq] == ["forged"]


def test_evidence_bundle_lists_missing_artifact_bytes(as_auditor, story):
    first = versions(story, "report.txt")[0]
    blob(first.artifact).unlink()

    evidence, archive = bundle(as_auditor, story)

    assert evidence["missing_artifacts"] == [first.artifact.sha256]
    assert f"artifacts/{first.artifact.sha256}" not in archive.namelist()


def test_evidence_bundle_names_artifact_bytes_altered_on_disk(as_auditor, story):
    first = versions(story, "report.txt")[0]
    blob(first.artifact).write_bytes(b"rewritten on disk")

    evidence, archive = bundle(as_auditor, story)

    assert evidence["altered_artifacts"] == [first.artifact.sha256]
    assert evidence["missing_artifacts"] == []
    assert archive.read(f"artifacts/{first.artifact.sha256}") == b"rewritten on disk"


# --- Exports --------------------------------------------------------------------------


def export(client: Client, fmt: str, query: str):
    """The streamed export: its response and its text."""
    response = client.get(f"/audit/export.{fmt}?{query}")
    assert response.status_code == 200
    assert response.streaming
    return response, b"".join(response.streaming_content).decode()


def from_csv(text: str) -> tuple[dict, list[dict]]:
    """The ``# name: value`` header lines, then the rows under the CSV's header row."""
    comments = re.match(r"(#[^\n]*\n)*", text)[0]
    header = dict(line[2:].split(": ", 1) for line in comments.splitlines())
    return header, list(csv.DictReader(io.StringIO(text[len(comments) :], newline="")))


def from_jsonl(text: str) -> tuple[dict, list[dict]]:
    header, *rows = (json.loads(line) for line in text.split("\n")[:-1])
    return header, rows


def expected_rows(queryset) -> list[dict]:
    """What an export must say about each checkpoint, in the export's own types."""
    return [
        {
            "id": c.pk,
            "created_at": c.created_at.isoformat(),
            "project": c.run.project.slug,
            "run": c.run_id,
            "session": c.run.session_id,
            "seq": c.seq,
            "event": c.event,
            "from_status": c.from_status,
            "to_status": c.to_status,
            "actor_kind": c.actor_kind,
            "actor": c.actor_label,
            "operation": c.operation_id,
            "action": c.operation.action if c.operation else None,
            "risk": c.operation.risk if c.operation else None,
            "reason": c.reason,
            "state": c.state,
            "prev_hash": c.prev_hash,
            "hash": c.hash,
        }
        for c in queryset.select_related("run__project", "operation")
    ]


def as_csv_cells(row: dict) -> dict:
    """A row as the CSV writes it: None is an empty cell, numbers are text (the state,
    JSON text, is compared decoded)."""
    return {k: v if k == "state" else "" if v is None else str(v) for k, v in row.items()}


def decoded_states(rows: list[dict]) -> list[dict]:
    return [{**row, "state": json.loads(row["state"])} for row in rows]


QUERY = "actor_kind=agent&run={run}&sort=run"


def test_csv_export_parses_back_to_the_checkpoints(as_auditor, story):
    query = QUERY.format(run=story.pk)

    response, text = export(as_auditor, "csv", query)
    header, rows = from_csv(text)

    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert re.fullmatch(
        r'attachment; filename="oversight-checkpoints-\d{8}-\d{6}\.csv"',
        response["Content-Disposition"],
    )
    assert header["export"] == "oversight checkpoints"
    assert header["query"] == response["X-Oversight-Query"] == query
    assert header["exported_by"] == "auditor"
    matching = story.checkpoints.filter(actor_kind="agent").order_by("seq")
    assert len(rows) == matching.count() > 3
    assert decoded_states(rows) == [as_csv_cells(row) for row in expected_rows(matching)]


def test_jsonl_export_parses_back_to_the_checkpoints(as_auditor, story):
    query = QUERY.format(run=story.pk)

    response, text = export(as_auditor, "jsonl", query)
    header, rows = from_jsonl(text)

    assert response["Content-Type"] == "application/jsonl; charset=utf-8"
    assert response["X-Oversight-Query"] == query
    assert {k: header[k] for k in ("export", "query", "exported_by")} == {
        "export": "oversight checkpoints",
        "query": query,
        "exported_by": "auditor",
    }
    matching = story.checkpoints.filter(actor_kind="agent").order_by("seq")
    assert rows == expected_rows(matching)


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
@pytest.mark.parametrize("sort", ["newest", "oldest", "run"])
def test_export_across_batches_gives_every_row_once_in_order(
    as_auditor, story, session, monkeypatch, fmt, sort
):
    start_run(session=session, goal="A second run", actor=AGENT)
    monkeypatch.setattr("runs.audit.export.BATCH", 7)
    parse = from_csv if fmt == "csv" else from_jsonl

    _, rows = parse(export(as_auditor, fmt, f"sort={sort}")[1])

    ordering = {"newest": ["-created_at", "-id"], "oldest": ["created_at", "id"]}
    expected = Checkpoint.objects.order_by(*ordering.get(sort, ["run_id", "seq"]))
    assert expected.count() > 2 * 7  # three batches or more
    assert [int(row["id"]) for row in rows] == list(expected.values_list("pk", flat=True))


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_export_arrives_in_chunks_of_whole_lines_not_a_line_at_a_time(
    as_auditor, story, monkeypatch, fmt
):
    """Each chunk costs the server a write: many lines go in one, and none is split."""
    monkeypatch.setattr("runs.audit.export.CHUNK", 4000)
    whole = export(as_auditor, fmt, "sort=oldest")[1]

    response = as_auditor.get(f"/audit/export.{fmt}?sort=oldest")
    chunks = [chunk.decode() for chunk in response.streaming_content]

    moment = re.compile(r"exported_at\W+[\d:.T+-]+")  # The two exports' own times.
    assert moment.sub("", "".join(chunks)) == moment.sub("", whole)
    assert 1 < len(chunks) < whole.count("\n") / 2
    assert all(chunk.endswith("\n") for chunk in chunks)
    assert all(len(chunk) >= 4000 for chunk in chunks[:-1])


def test_csv_neutralises_formulas_that_json_lines_keep(as_auditor, run, propose, reviewer):
    formulas = ['=HYPERLINK("http://evil.example","x")', "+1+1", "-2+3", "@SUM(A1)"]
    prose = 'Says "no", then\nleaves'
    for n, comment in enumerate([*formulas, prose]):
        decide_on(propose(f"call-{n}"), reviewer, Decision.Kind.REJECT, comment=comment)

    _, csv_rows = from_csv(export(as_auditor, "csv", "decision=reject&sort=oldest")[1])
    _, json_rows = from_jsonl(export(as_auditor, "jsonl", "decision=reject&sort=oldest")[1])

    assert [row["reason"] for row in csv_rows] == [*(f"'{f}" for f in formulas), prose]
    assert [row["reason"] for row in json_rows] == [*formulas, prose]


def test_csv_neutralises_formulas_in_names_people_and_agents_choose(as_auditor, auditor, project):
    project.slug = "-1+1"
    project.save()
    session = open_session(project=project, owner=auditor, agent="helper")
    run = start_run(session=session, goal="Named", actor=Actor.agent("=1+2"))
    # An action no worker knows is the agent's own to carry out. Its name is now plain
    # (#35), but one proposed before that could be any: the export still neutralises it.
    operation = propose_operation(
        run=run,
        call_id="call-1",
        action="notes.append",
        arguments={},
        risk="low",
        rollback_kind="none",
        base_version=run.version,
        actor=Actor.agent("=1+2"),
    )
    type(operation).objects.filter(pk=operation.pk).update(action="@SUM(A1)")

    _, rows = from_csv(export(as_auditor, "csv", "")[1])

    assert {(row["project"], row["actor"]) for row in rows} == {("'-1+1", "'=1+2")}
    assert {row["action"] for row in rows} == {"", "'@SUM(A1)"}


def test_export_holds_only_the_users_projects(as_auditor, story, other_project, outsider):
    session = open_session(project=other_project, owner=outsider, agent="elsewhere")
    elsewhere = start_run(session=session, goal="Away", actor=AGENT)
    for fmt, parse in [("csv", from_csv), ("jsonl", from_jsonl)]:
        assert parse(export(as_auditor, fmt, f"run={elsewhere.pk}")[1])[1] == []
        _, rows = parse(export(as_auditor, fmt, "")[1])
        assert {str(row["project"]) for row in rows} == {"acme"}


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
@pytest.mark.parametrize(
    ("query", "label"),
    [
        ("since=someday", "Since"),
        # Refused before the download starts, not a 200 whose stream breaks off.
        ("run=99999999999999999999", "Run"),
        ("until=9999-12-31", "Until"),
    ],
)
def test_export_with_invalid_filters_is_refused(as_auditor, story, fmt, query, label):
    response = as_auditor.get(f"/audit/export.{fmt}?{query}")

    assert response.status_code == 400
    assert not response.streaming
    assert f'<p class="error" role="alert">{label}: ' in response.text


# --- Queries per page ------------------------------------------------------------------


@pytest.fixture(params=[2, 20], ids=["2 decisions", "20 decisions"])
def decided(request, run, propose, reviewer) -> Run:
    """The run with ``request.param`` operations a reviewer rejected (with a comment)
    and as many versions of one artifact."""
    for n in range(request.param):
        decide_on(propose(f"call-{n}"), reviewer, Decision.Kind.REJECT, comment=f"Not {n}")
        attach_artifact(run=run, name="report.txt", content=f"v{n}\n".encode(), actor=AGENT)
    run.refresh_from_db()
    return run


def searches(run: Run) -> list[str]:
    """The benchmarked searches (docs/performance.md), on this history."""
    middle = run.checkpoints.order_by("seq")[run.version // 2]
    deep = encode_cursor(SORTS["newest"].key(middle))
    return [
        "/audit/",
        "/audit/?actor=reviewer&decision=reject&since=2020-01-01&until=2099-12-31",
        "/audit/?status=rejected&since=2020-01-01&until=2099-12-31",
        f"/audit/?run={run.pk}&sort=run",
        "/audit/?q=Not",
        "/audit/?q=zzyzx",
        f"/audit/?after={deep}",
    ]


def test_every_audit_page_runs_the_same_6_queries_8_for_a_checkpoint(
    as_auditor, decided, django_assert_num_queries
):
    """Whatever the history's size: with 2 decisions and with 20, each search runs 6
    queries and a checkpoint's page (with its diff) 8."""
    latest = decided.checkpoints.order_by("seq").last()
    pages = [(url, 6) for url in searches(decided)] + [
        (f"/audit/checkpoints/{latest.pk}/", 8),
        (f"/audit/checkpoints/{latest.pk}/?against=1", 8),
    ]
    page(as_auditor, "/audit/")  # The first visit stores the time zone in the session.
    for url, queries in pages:
        with django_assert_num_queries(queries):
            text = page(as_auditor, url)
        listed = "No checkpoints match." if "zzyzx" in url else "/audit/checkpoints/"
        assert listed in text, url


# --- Auditors change nothing -------------------------------------------------------------

# Every route of the app that a POST may change something through (or, like an edit's
# preview, that only a decider may POST to), and every route that only reads. A new
# route must be added to one of them (or to MINE) before this passes.
WRITES = [
    "operation-decide",
    "operation-edit",
    "operation-requeue",
    "request-answer",
    "run-cancel",
    "alert-acknowledge",
    "alert-resolve",
    "alert-send-again",
    "tokens",
    "token-revoke",
    "webhooks",
    "webhook-state",
    "webhook-secret",
    "webhook-send-again",
]
READS = [
    "home",
    "healthz",
    "approvals",
    "operation",
    "operation-outcome",
    "request",
    "runs",
    "run",
    "run-artifact",
    "alerts",
    "audit",
    "audit-export-csv",
    "audit-export-jsonl",
    "audit-checkpoint",
    "audit-run",
    "audit-verify",
    "audit-evidence",
    "audit-artifact",
    "numbers",
    "metrics",
]
# The signed-in person's own settings, and their answer to a token that would act for them.
MINE = ["preferences", "token-acceptance", "slack-link", "slack-unlink"]
# Called by another service, not by people: Slack's, signed by Slack (and none without
# Slack set up, as here).
CALLBACKS = ["slack-interactivity"]


def test_every_route_is_classified():
    names = {pattern.name for pattern in get_resolver("runs.urls").url_patterns}
    assert sorted(names) == sorted(WRITES + READS + MINE + CALLBACKS)


@pytest.fixture
def targets(story, approved, propose, session, project) -> dict[str, tuple[str, dict]]:
    """A real object in the auditor's project behind every route, by route name: the
    URL and what a POST to it would send. The story's run gets an open alert; a second
    run waits for a decision; the project has an agent token."""
    approved("http-rigged-no-undo")
    Worker("test-worker").drain()
    alert = Alert.objects.get(status=Alert.Status.OPEN)
    waiting = start_run(session=session, goal="Waiting for you", actor=AGENT)
    pending = propose("pending", target=waiting)
    asked, _ = ask(run=waiting, prompt="Ship it?", actor=AGENT)
    token, _ = issue_token(project=project, name="planner", issued_by=session.owner)
    hook, delivery = endpoint_with_delivery(project, WebhookDelivery.Status.FAILED)
    ref = versions(story, "report.txt")[0]
    kwargs = {
        "operation-decide": {"pk": pending.pk},
        "operation-edit": {"pk": pending.pk},
        "operation-requeue": {"pk": pending.pk},
        "request-answer": {"pk": asked.pk},
        "request": {"pk": asked.pk},
        "run-cancel": {"pk": waiting.pk},
        "alert-acknowledge": {"pk": alert.pk},
        "alert-resolve": {"pk": alert.pk},
        "alert-send-again": {"pk": alert.pk},
        "tokens": {"slug": project.slug},
        "numbers": {"slug": project.slug},
        "token-revoke": {"slug": project.slug, "pk": token.pk},
        "webhooks": {"slug": project.slug},
        "webhook-state": {"slug": project.slug, "pk": hook.pk},
        "webhook-secret": {"slug": project.slug, "pk": hook.pk},
        "webhook-send-again": {"slug": project.slug, "pk": delivery.pk},
        "operation": {"pk": pending.pk},
        "operation-outcome": {"pk": pending.pk},
        "run": {"pk": story.pk},
        "run-artifact": {"pk": story.pk, "ref": ref.pk},
        "audit-checkpoint": {"pk": at(story, seq=2).pk},
        "audit-run": {"pk": story.pk},
        "audit-verify": {"pk": story.pk},
        "audit-evidence": {"pk": story.pk},
        "audit-artifact": {"pk": ref.pk},
    }
    data = {
        "operation-decide": {"kind": "approve", "arguments_hash": pending.arguments_hash},
        "operation-edit": {"arguments_hash": pending.arguments_hash, "arguments": "{}"},
        "request-answer": {"kind": "approve", "version": asked.version},
        "run-cancel": {"reason": "Stop it"},
        "operation-requeue": {"reason": "Fixed"},
        "alert-resolve": {"note": "Fixed by hand"},
        "tokens": {"name": "another"},
        "webhooks": {"name": "another", "url": "https://hooks.example.com/", "events": "decided"},
        "webhook-state": {"active": "off"},
        "webhook-secret": {"name": hook.name},
    }
    return {
        name: (reverse(name, kwargs=kwargs.get(name, {})), data.get(name, {}))
        for name in WRITES + READS + CALLBACKS
    }


def unchanged() -> tuple:
    return (
        stored(),
        list(Alert.objects.values_list("status", "acknowledged_by", "resolved_by")),
        list(AgentToken.objects.values_list("name", "revoked_at")),
        list(WebhookEndpoint.objects.values_list("name", "salt", "active")),
        list(WebhookDelivery.objects.values_list("status", "attempts")),
    )


@pytest.mark.parametrize(
    ("name", "status"),
    # Writes are forbidden to auditors (403); read-only pages take no POST at all (405);
    # Slack's callback is not there without Slack (404).
    [
        *((name, 403) for name in WRITES),
        *((name, 405) for name in READS),
        *((name, 404) for name in CALLBACKS),
    ],
)
def test_auditor_posts_change_nothing(as_auditor, targets, name, status):
    url, data = targets[name]
    before = unchanged()

    assert as_auditor.post(url, data).status_code == status
    assert unchanged() == before


# --- User text stays text ----------------------------------------------------------------


@pytest.fixture
def hostile(session, propose, reviewer) -> dict[str, str]:
    """A run where every piece of user text carries a script; the audit pages to check."""
    run = start_run(session=session, goal=f"Goal {XSS}", actor=AGENT)
    decide_on(propose("no", target=run), reviewer, Decision.Kind.REJECT, comment=f"No: {XSS}")
    for content in (b"first\n", f"Said {XSS}\n".encode()):
        attach_artifact(run=run, name=f"{XSS}.txt", content=content, actor=AGENT)
    rejected = at(run, to_status="rejected")
    ref = versions(run, f"{XSS}.txt")[1]
    return {
        "search": f"/audit/?q={XSS}",
        "search results": "/audit/?decision=reject",
        "checkpoint": f"/audit/checkpoints/{rejected.pk}/",
        "artifact checkpoint": f"/audit/checkpoints/{ref.checkpoint_id}/",
        "run": f"/audit/runs/{run.pk}/",
        "artifact": f"/audit/artifacts/{ref.pk}/",
    }


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("search", [f'value="{ESCAPED}"']),
        ("search results", [f"No: {ESCAPED}"]),
        ("checkpoint", [f"<dd>No: {ESCAPED}</dd>", f"“No: {ESCAPED}”"]),
        ("artifact checkpoint", [f"<code>{ESCAPED}.txt</code>"]),
        ("run", [f"Goal {ESCAPED}", f"No: {ESCAPED}", f"<code>{ESCAPED}.txt</code>"]),
        ("artifact", [f"<code>{ESCAPED}.txt</code>", f"Said {ESCAPED}", f"+ Said {ESCAPED}"]),
    ],
)
def test_user_text_is_shown_as_text(as_auditor, hostile, name, expected):
    text = page(as_auditor, hostile[name])

    assert XSS not in text
    for snippet in expected:
        assert snippet in text
