"""Artifacts in an object store (#39 item 1): ``OVERSIGHT_ARTIFACT_STORE=s3://…`` against
a real S3-compatible server on loopback (moto's server mode), reached through a relay
that can be cut: the store's outage, as a web process or a worker meets it.

What is promised: a blob is whole or absent, its bytes are checked against their
sha256 when read, a store out of reach is a 503 (never a 500, never a half-written
state), and an operation that needs the store waits for it and never commits without
its undo copy."""

import hashlib
from datetime import timedelta
from functools import partial
from io import StringIO

import boto3
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.test import Client
from moto.server import ThreadedMotoServer

from oversight.env import artifact_storage
from runs import artifact_store
from runs.actions.base import Context, TryLater
from runs.actions.files import workspace_of
from runs.actions.registry import get_action, parse_arguments
from runs.canonical import sha256_hex
from runs.clock import db_now
from runs.models import Artifact, CheckpointArtifact, Operation
from runs.services.artifacts import attach_artifact, collect_orphan_artifacts, store_artifact
from tests.api_helpers import Api, artifact_body, problem
from tests.conftest import AGENT
from tests.helpers import drained, stored
from tests.outage import Outage

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.api_helpers"]
PREFIX = "oversight/artifacts"
PATH = "notes/today.md"


@pytest.fixture(scope="session")
def s3_server():
    """An S3-compatible server of the test process's own, on a free loopback port."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def bucket(s3_server, monkeypatch, request):
    """A bucket of the test's own, and a client that reads it behind Oversight's back."""
    for name, value in (("AWS_ACCESS_KEY_ID", "oversight"), ("AWS_SECRET_ACCESS_KEY", "s3cr3t")):
        monkeypatch.setenv(name, value)
    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1")
    name = "t-" + hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:20]
    client.create_bucket(Bucket=name)
    return client, name


@pytest.fixture
def store(bucket, s3_server, settings):
    """The object store as Oversight's artifact store, through a relay that ``cut()``
    makes unreachable and ``hang()`` silent (each answer awaited for a second)."""
    _, name = bucket
    with Outage(s3_server) as relay:
        url = f"s3://{name}/{PREFIX}?endpoint_url={relay.url}&region=us-east-1"
        settings.STORAGES = {
            **settings.STORAGES,
            "artifacts": artifact_storage(url + "&addressing_style=path&read_timeout=1"),
        }
        yield relay


def object_of(bucket, sha256: str) -> bytes:
    client, name = bucket
    return client.get_object(Bucket=name, Key=f"{PREFIX}/{sha256[:2]}/{sha256}")["Body"].read()


def keys(bucket) -> list[str]:
    client, name = bucket
    return [item["Key"] for item in client.list_objects_v2(Bucket=name).get("Contents", [])]


def test_an_artifact_uploaded_is_an_object_in_the_bucket_and_downloads_whole(
    api, run, store, bucket
):
    content = b"quarterly figures\n" * 1000
    response = api.post(f"/runs/{run.pk}/artifacts", artifact_body(content, name="q3.txt"))

    assert response.status_code == 201, response.content
    sha = sha256_hex(content)
    assert object_of(bucket, sha) == content
    fetched = api.get(f"/artifacts/{sha}")
    assert (fetched.status_code, fetched.getvalue()) == (200, content)
    assert fetched["Content-Disposition"] == 'attachment; filename="q3.txt"'


def test_bytes_changed_in_the_bucket_are_never_served_and_the_audit_page_says_so(
    api, run, store, bucket, client, auditor
):
    attach_artifact(run=run, name="report.txt", content=b"alpha\n", actor=AGENT)
    sha = sha256_hex(b"alpha\n")
    s3, name = bucket
    s3.put_object(Bucket=name, Key=f"{PREFIX}/{sha[:2]}/{sha}", Body=b"omega\n")

    problem(api.get(f"/artifacts/{sha}"), 404)
    client.force_login(auditor)
    reference = CheckpointArtifact.objects.get(artifact__sha256=sha)
    page = client.get(f"/audit/artifacts/{reference.pk}/").text
    assert "does NOT match the stored bytes" in page


def test_an_upload_while_the_store_is_out_of_reach_is_a_503_and_records_nothing(
    agent_token, run, store, bucket
):
    api = Api(agent_token.plain, Client(raise_request_exception=False))
    before = stored()
    store.cut()

    response = api.post(f"/runs/{run.pk}/artifacts", artifact_body(b"lost?\n"))

    body = problem(response, 503)
    assert body["detail"] == "the artifact store cannot be reached just now: try again"
    assert response["Retry-After"]
    assert stored() == before
    assert not Artifact.objects.exists()
    store.restore()
    assert api.post(f"/runs/{run.pk}/artifacts", artifact_body(b"lost?\n")).status_code == 201
    assert object_of(bucket, sha256_hex(b"lost?\n")) == b"lost?\n"


def test_an_upload_to_a_store_that_hangs_is_a_503_once_its_timeouts_ran_out(
    agent_token, run, store
):
    api = Api(agent_token.plain, Client(raise_request_exception=False))
    before = stored()
    store.hang()

    response = api.post(f"/runs/{run.pk}/artifacts", artifact_body(b"stuck?\n"))

    assert problem(response, 503)["detail"].startswith("the artifact store cannot be reached")
    assert stored() == before


def test_an_undo_whose_copy_is_out_of_reach_touches_nothing_and_is_tried_again(
    approved, project, store
):
    target = workspace_of(project) / PATH
    target.parent.mkdir(parents=True)
    target.write_text("hello\n")  # The write, whose verification failed.
    previous = store_artifact(b"previous\n").sha256
    op = approved("file", expected_sha256=previous)
    op.intent = {"previous": previous, "writes": sha256_hex(b"hello\n")}
    action = get_action("file.write")
    undo = partial(
        action.undo,
        parse_arguments(action, op.arguments),
        op.idempotency_key,
        Context(operation=op, intent=op.intent),
    )
    store.cut()

    with pytest.raises(TryLater, match="the artifact store is out of reach"):
        undo()

    assert target.read_text() == "hello\n"
    store.restore()
    undo()
    assert target.read_text() == "previous\n"


def test_a_download_while_the_store_is_out_of_reach_is_a_503_page(run, store, client, reviewer):
    attach_artifact(run=run, name="report.txt", content=b"alpha\n", actor=AGENT)
    reference = CheckpointArtifact.objects.get()
    client = Client(raise_request_exception=False)
    client.force_login(reviewer)
    store.cut()

    response = client.get(f"/runs/{run.pk}/artifacts/{reference.pk}/")

    assert response.status_code == 503
    assert "The artifact store cannot be reached just now" in response.text


def test_a_write_waits_out_the_store_s_outage_and_commits_with_its_undo_copy(
    approved, project, store, bucket
):
    target = workspace_of(project) / PATH
    target.parent.mkdir(parents=True)
    target.write_text("previous\n")
    store.cut()

    op = drained(approved("file", expected_sha256=sha256_hex(b"previous\n")))

    assert op.status == Operation.Status.IN_FLIGHT
    assert op.intent is None  # Nothing fired: the undo copy could not be kept.
    failed = op.checkpoints.order_by("-seq").first()
    assert failed.event == "operation.attempt_failed"
    assert failed.reason.startswith("attempt 1 failed"), failed.reason
    assert target.read_text() == "previous\n"
    store.restore()
    Operation.objects.filter(pk=op.pk).update(lease_expires_at=db_now() - timedelta(seconds=1))

    op = drained(op)

    assert op.status == Operation.Status.COMMITTED
    assert target.read_text() == "hello\n"
    assert object_of(bucket, op.intent["previous"]) == b"previous\n"


def test_orphans_in_the_bucket_are_collected_and_referenced_blobs_kept(run, store, bucket):
    attach_artifact(run=run, name="kept.txt", content=b"kept\n", actor=AGENT)
    store_artifact(b"orphan\n")
    s3, name = bucket
    s3.put_object(Bucket=name, Key=f"{PREFIX}/ab/.incoming-left-by-a-crash", Body=b"")

    removed = collect_orphan_artifacts(older_than=timedelta(0), now=db_now() + timedelta(1))

    assert sorted(removed) == sorted([sha256_hex(b"orphan\n"), ".incoming-left-by-a-crash"])
    kept = sha256_hex(b"kept\n")
    assert keys(bucket) == [f"{PREFIX}/{kept[:2]}/{kept}"]


def test_check_invariants_names_a_referenced_object_missing_from_the_bucket(run, store, bucket):
    attach_artifact(run=run, name="report.txt", content=b"alpha\n", actor=AGENT)
    sha = sha256_hex(b"alpha\n")
    s3, name = bucket
    s3.delete_object(Bucket=name, Key=f"{PREFIX}/{sha[:2]}/{sha}")
    out = StringIO()

    with pytest.raises(SystemExit):
        call_command("check_invariants", stdout=out, stderr=out)

    assert f"artifact {sha} is referenced by a checkpoint but missing" in out.getvalue()


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://bucket", "must be s3://bucket[/prefix][?options]"),
        ("s3://", "must be s3://bucket[/prefix][?options]"),
        ("s3://key:secret@bucket", "must not carry credentials"),
        ("s3://bucket?colour=blue", "unknown option 'colour'"),
        ("s3://bucket?addressing_style=sideways", "addressing_style must be"),
        ("s3://bucket?read_timeout=forever", "read_timeout must be seconds"),
        ("s3://bucket?connect_timeout=0", "connect_timeout must be seconds"),
    ],
)
def test_a_store_url_that_is_wrong_stops_the_process_saying_why(url, says):
    with pytest.raises(ImproperlyConfigured, match="OVERSIGHT_ARTIFACT_STORE") as refused:
        artifact_storage(url)
    assert says in str(refused.value)


def test_the_local_folder_is_the_default_and_a_store_url_names_bucket_prefix_and_endpoint():
    assert artifact_storage("") == {"BACKEND": "runs.artifact_store.DurableFileSystemStorage"}
    options = artifact_storage("s3://reports/oversight/?endpoint_url=http://minio:9000")["OPTIONS"]
    assert (options["bucket_name"], options["location"], options["endpoint_url"]) == (
        "reports",
        "oversight",
        "http://minio:9000",
    )
    assert artifact_store.name_of("ab" + "0" * 62) == "ab/ab" + "0" * 62
