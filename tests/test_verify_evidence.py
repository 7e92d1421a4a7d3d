"""An evidence bundle proves itself: ``verify_evidence`` (and five lines of plain
Python) recompute its chain and artifact hashes without the database, and any edit to
the bundle is named. It names who issued the agent's token, and a decision four eyes
forbids fails it."""

import hashlib
import json
import zipfile
from datetime import UTC
from io import BytesIO, StringIO

import pytest
from django.core.management import CommandError, call_command

from runs.engine.worker import Worker
from runs.models import AgentToken
from runs.services.artifacts import attach_artifact
from tests.conftest import AGENT
from tests.helpers import decide_on


@pytest.fixture
def bundle_path(client, auditor, run, propose, reviewer, accounts, agent_token, tmp_path):
    """The run's evidence bundle, downloaded as an auditor would and saved to a file."""
    attach_artifact(run=run, name="report.txt", content=b"v1\n", actor=AGENT)
    decide_on(propose("pay", token=agent_token), reviewer, comment="matches the invoice")
    Worker("test-worker").drain()
    attach_artifact(run=run, name="report.txt", content=b"v2\n", actor=AGENT)
    client.force_login(auditor)
    response = client.get(f"/audit/runs/{run.pk}/evidence.zip")
    path = tmp_path / "evidence.zip"
    path.write_bytes(b"".join(response.streaming_content))
    return path


def verify(path) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    try:
        call_command("verify_evidence", str(path), stdout=out, stderr=err)
    except SystemExit as exit_:
        return exit_.code, out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def rewrite(path, change) -> None:
    """Apply ``change(evidence, files)`` to the bundle and write it back."""
    with zipfile.ZipFile(path) as archive:
        files = {name: archive.read(name) for name in archive.namelist()}
    evidence = json.loads(files.pop("evidence.json"))
    change(evidence, files)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("evidence.json", json.dumps(evidence))
        for name, content in files.items():
            archive.writestr(name, content)


def test_a_downloaded_bundle_verifies(bundle_path, run):
    run.refresh_from_db()
    code, out, err = verify(bundle_path)
    assert (code, err) == (0, "")
    head = run.checkpoints.order_by("-seq").first().hash
    assert out.strip() == (
        f"evidence for run {run.pk} verifies: {run.version} checkpoints, head {head}, "
        "2 artifact version(s)"
    )


def test_anyone_can_check_the_chain_with_plain_python(bundle_path):
    """The rule, without Oversight's code: each checkpoint minus its hash, as canonical
    JSON, hashes to its hash; each names the previous one's hash."""
    evidence = json.loads(zipfile.ZipFile(bundle_path).read("evidence.json"))
    previous = ""
    for doc in evidence["checkpoints"]:
        body = {k: v for k, v in doc.items() if k != "hash"}
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert hashlib.sha256(canonical.encode()).hexdigest() == doc["hash"]
        assert doc["prev_hash"] == previous
        previous = doc["hash"]
    assert len(evidence["checkpoints"]) == evidence["run"]["version"] > 5


def test_the_bundle_names_who_issued_the_agent_s_token(client, auditor, admin_user, run):
    AgentToken.objects.filter(pk=run.session.token_id).update(issued_by=admin_user)
    client.force_login(auditor)

    response = client.get(f"/audit/runs/{run.pk}/evidence.zip")
    with zipfile.ZipFile(BytesIO(b"".join(response.streaming_content))) as archive:
        token = json.loads(archive.read("evidence.json"))["run"]["session"]["token"]

    accepted_at = run.session.token.accepted_at.astimezone(UTC).isoformat()
    assert token == {
        "name": "test-agent",
        "prefix": run.session.token.prefix,
        "owner": "owner",
        "issued_by": "admin",
        "accepted_at": accepted_at,
    }


def edit_reason(evidence, files):
    evidence["checkpoints"][3]["reason"] = "approved after a call"


def drop_checkpoint(evidence, files):
    del evidence["checkpoints"][2]


def drop_last_checkpoint(evidence, files):
    evidence["checkpoints"].pop()


def swap_artifact_bytes(evidence, files):
    first = evidence["artifacts"][0]["file"]
    files[first] = b"v1, rewritten\n"


def decided_by_the_issuer(evidence, files):
    """As if the reviewer who approved had issued the token that proposed."""
    operation = evidence["operations"][0]
    operation["proposed_by_token"]["issued_by"] = operation["decisions"][0]["by"]


@pytest.mark.parametrize(
    ("tamper", "named"),
    [
        (edit_reason, "checkpoint 4: content does not match its hash (edited)"),
        (drop_checkpoint, "checkpoint 3: seq 4 found, a gap"),
        (drop_last_checkpoint, "checkpoints but the run is at version"),
        (swap_artifact_bytes, "does not match its sha256"),
        (
            decided_by_the_issuer,
            "decided (approve) by reviewer, who issued the agent token that proposed it "
            "(four eyes)",
        ),
    ],
)
def test_an_edited_bundle_fails_naming_what_changed(bundle_path, tamper, named):
    rewrite(bundle_path, tamper)
    code, out, err = verify(bundle_path)
    assert code == 1
    assert out == ""
    assert named in err


def test_not_a_bundle_is_one_clear_error(tmp_path):
    path = tmp_path / "notes.zip"
    path.write_bytes(b"not a zip at all")
    with pytest.raises(CommandError, match=r"notes.zip is not an evidence bundle"):
        call_command("verify_evidence", str(path))
    empty = tmp_path / "empty.zip"
    zipfile.ZipFile(empty, "w").close()
    with pytest.raises(CommandError, match=r"empty.zip is not an evidence bundle"):
        call_command("verify_evidence", str(empty))
