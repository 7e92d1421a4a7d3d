"""Artifacts: content-addressed blobs on disk, referenced by checkpoints, and the
collection of blobs nothing references."""

import hashlib
import os
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from runs.canonical import sha256_hex
from runs.errors import InvalidInput
from runs.models import Artifact, CheckpointArtifact, Run
from runs.services.artifacts import attach_artifact, collect_orphan_artifacts, store_artifact
from runs.transitions import transition_run
from tests.api_helpers import artifact_body, problem
from tests.conftest import AGENT
from tests.helpers import blob

pytest_plugins = ["tests.api_helpers"]

GRACE = timedelta(hours=1)


@pytest.fixture(autouse=True)
def artifact_root(settings, tmp_path):
    settings.OVERSIGHT_ARTIFACT_ROOT = tmp_path
    return tmp_path


def stored_files(root) -> list:
    return sorted(path for path in root.rglob("*") if path.is_file())


def latest_checkpoint(run: Run):
    return run.checkpoints.order_by("-seq").first()


def backdate(artifact: Artifact, age: timedelta) -> None:
    Artifact.objects.filter(pk=artifact.pk).update(stored_at=timezone.now() - age)


def test_same_bytes_are_stored_once(db, artifact_root):
    content = b"print('hello')\n"
    first = store_artifact(content)
    second = store_artifact(content)
    assert first.pk == second.pk
    assert Artifact.objects.count() == 1
    assert stored_files(artifact_root) == [blob(first)]
    assert blob(first).read_bytes() == content
    assert first.sha256 == hashlib.sha256(content).hexdigest()
    assert first.size == len(content)


def test_attached_artifact_is_on_disk_before_the_checkpoint_names_it(run):
    """The order a crash relies on (bytes on disk, then the artifact's row, then the
    checkpoint's reference), watched as each row goes to the database."""
    content = b"x = 1\n"
    stored_blob = blob(sha256_hex(content))
    watched = [Artifact._meta.db_table, CheckpointArtifact._meta.db_table]
    inserts = []

    def watch(execute, sql, params, many, context):
        if table := next((t for t in watched if sql.startswith(f'INSERT INTO "{t}"')), None):
            inserts.append((table, stored_blob.exists() and stored_blob.read_bytes() == content))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(watch):
        artifact = attach_artifact(run=run, name="app.py", content=content, actor=AGENT)

    assert inserts == [(table, True) for table in watched]
    checkpoint = latest_checkpoint(run)
    ref = CheckpointArtifact.objects.get(checkpoint=checkpoint)
    assert (ref.name, ref.artifact) == ("app.py", artifact)
    assert checkpoint.state["artifacts"]["app.py"]["sha256"] == artifact.sha256


def test_later_checkpoints_carry_every_artifact_version_forward(run):
    first = attach_artifact(run=run, name="app.py", content=b"v1", actor=AGENT)
    readme = attach_artifact(run=run, name="README.md", content=b"# Readme", actor=AGENT)
    transition_run(run=run, to=Run.Status.COMPLETED, actor=AGENT)
    artifacts = latest_checkpoint(run).state["artifacts"]
    assert {name: entry["sha256"] for name, entry in artifacts.items()} == {
        "app.py": first.sha256,
        "README.md": readme.sha256,
    }


def test_a_new_version_replaces_the_old_one_in_the_artifact_map(run):
    attach_artifact(run=run, name="app.py", content=b"v1", actor=AGENT)
    second = attach_artifact(run=run, name="app.py", content=b"v2", actor=AGENT)
    assert latest_checkpoint(run).state["artifacts"]["app.py"] == {
        "sha256": second.sha256,
        "size": 2,
    }


def test_content_over_the_size_limit_is_refused_and_nothing_written(run, settings, artifact_root):
    settings.OVERSIGHT_ARTIFACT_MAX_BYTES = 4
    version = run.version
    with pytest.raises(InvalidInput):
        attach_artifact(run=run, name="big.bin", content=b"12345", actor=AGENT)
    run.refresh_from_db()
    assert run.version == version
    assert not Artifact.objects.exists()
    assert stored_files(artifact_root) == []


def test_content_at_the_size_limit_is_stored(db, settings):
    settings.OVERSIGHT_ARTIFACT_MAX_BYTES = 4
    assert store_artifact(b"1234").size == 4


@pytest.mark.parametrize(
    ("referenced", "age", "removed"),
    [
        pytest.param(False, 2 * GRACE, True, id="orphan past the grace period"),
        pytest.param(False, GRACE / 2, False, id="orphan inside the grace period"),
        pytest.param(True, 2 * GRACE, False, id="referenced"),
    ],
)
def test_collection_removes_only_old_unreferenced_blobs(run, referenced, age, removed):
    if referenced:
        artifact = attach_artifact(run=run, name="app.py", content=b"blob", actor=AGENT)
    else:
        artifact = store_artifact(b"blob")
    backdate(artifact, age)
    assert collect_orphan_artifacts(older_than=GRACE) == ([artifact.sha256] if removed else [])
    assert Artifact.objects.filter(pk=artifact.pk).exists() is not removed
    assert blob(artifact).exists() is not removed


def test_collection_removes_a_stray_file_that_has_no_row(db):
    digest = hashlib.sha256(b"stray").hexdigest()
    path = blob(digest)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"stray")
    old = (timezone.now() - 2 * GRACE).timestamp()
    os.utime(path, (old, old))
    assert collect_orphan_artifacts(older_than=GRACE) == [digest]
    assert not path.exists()


def test_collect_command_prints_how_many_blobs_it_removed(db):
    for content in (b"one", b"two"):
        backdate(store_artifact(content), 2 * GRACE)
    out = StringIO()
    call_command("collect_orphan_artifacts", stdout=out)
    assert "2 orphan blob(s) removed" in out.getvalue()
    assert not Artifact.objects.exists()


# --- downloads --------------------------------------------------------------------------


@pytest.fixture
def downloads(api, run, client, reviewer):
    """``downloads(content, name, media_type)``: the agent uploads an artifact; the
    answers to its download through the API and through the run's page."""

    def fetch(content: bytes, name: str, media_type: str) -> list:
        body = artifact_body(content, name=name, media_type=media_type)
        assert api.post(f"/runs/{run.pk}/artifacts", body).status_code == 201
        ref = CheckpointArtifact.objects.get(checkpoint__run=run, name=name)
        client.force_login(reviewer)
        page = client.get(reverse("run-artifact", args=[run.pk, ref.pk]))
        return [api.get(f"/artifacts/{ref.artifact.sha256}"), page]

    return fetch


@pytest.mark.parametrize(
    "declared, served",
    [
        ("text/html", "application/octet-stream"),
        ("image/svg+xml", "application/octet-stream"),
        ("application/javascript", "application/octet-stream"),
        ("text/plain", "text/plain"),
        ("image/png", "image/png"),
    ],
)
def test_a_download_is_an_attachment_a_browser_will_not_run(downloads, declared, served):
    content = b"<script>alert(document.cookie)</script>"

    for response in downloads(content, "out/page.html", declared):
        assert response.status_code == 200
        assert response["Content-Type"] == served
        assert response["Content-Disposition"] == 'attachment; filename="page.html"'
        assert response["X-Content-Type-Options"] == "nosniff"
        assert response.getvalue() == content


def test_an_artifact_whose_bytes_are_gone_is_a_404_through_the_api(api, run):
    body = artifact_body(b"lost", name="lost.txt")
    sha = api.post(f"/runs/{run.pk}/artifacts", body).json()["sha256"]
    blob(sha).unlink()

    problem(api.get(f"/artifacts/{sha}"), 404)
