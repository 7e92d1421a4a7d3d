"""The agent API fuzzed from its own OpenAPI document (schemathesis): valid and invalid
requests to every operation, with a real token; no answer may be a server error, and
every answer must match the schema the document gives for its status."""

import base64
import json
import re
import zlib

import hypothesis
import pytest
import schemathesis
from django.db import transaction
from hypothesis import given
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from oversight.wsgi import application
from runs.actors import Actor
from runs.audit.search import SORTS, AuditFilter
from runs.canonical import sha256_hex
from runs.forms import QueueFilter, RunFilter
from runs.models import Artifact, CheckpointArtifact, Operation
from runs.services.artifacts import attach_artifact
from runs.services.proposals import propose_operation
from runs.services.requests import ask
from tests.api_helpers import PREFIX, agent_proposal
from tests.helpers import decide_on, stored

pytest_plugins = ["tests.api_helpers"]

schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", application)


@pytest.fixture
def world(agent_token, run, reviewer) -> dict:
    """Objects the fuzzed paths may hit: the run, an approved agent-executed operation,
    an open human request, an artifact; and the token's header."""
    run.refresh_from_db()
    op = propose_operation(
        run=run,
        call_id="fuzz-1",
        action="git.push",
        arguments={"branch": "main"},
        risk="low",
        rollback_kind="none",
        base_version=run.version,
        actor=Actor.agent("test-agent"),
    )
    decide_on(op, reviewer)
    artifact = attach_artifact(run=run, name="a.txt", content=b"fuzz", actor=Actor.agent("x"))
    asked, _ = ask(run=run, prompt="Ship it?", actor=Actor.agent("x"), token=agent_token)
    return {
        "headers": {"Authorization": f"Bearer {agent_token.plain}"},
        "session": run.session_id,
        "runs": run.pk,
        "operations": op.pk,
        "requests": asked.pk,
        "artifacts": artifact.sha256,
    }


def test_every_operation_of_the_document_is_fuzzed():
    """``schema.parametrize`` below generates cases for every operation schemathesis
    can read: none of the document's may be left out (unreadable)."""
    documented = {
        (method.upper(), path)
        for path, item in schema.raw_schema["paths"].items()
        for method in item
    }
    fuzzed = {(op.ok().method.upper(), op.ok().path) for op in schema.get_all_operations()}
    assert fuzzed == documented
    assert {("GET", f"{PREFIX}/events"), ("GET", f"{PREFIX}/actions")} <= fuzzed


def heads(value) -> bool:
    """A fair, repeatable coin toss on a generated value."""
    return zlib.crc32(repr(value).encode()) % 2 == 0


def aim(case, world: dict) -> None:
    """Point about half of the generated ids at real objects of the token's project (the
    rest stay made up, and are answered 404)."""
    parameters = case.path_parameters or {}
    for name in ("pk", "sha256"):
        if name in parameters and heads(parameters[name]):
            parameters[name] = world[case.path.split("/")[3]]
    body = case.body
    if isinstance(body, dict) and isinstance(body.get("session"), int) and heads(body):
        body["session"] = world["session"]


# The WSGI handler closes the database connection after each request, as a server does,
# so the data must be committed rather than held in a test transaction.
@pytest.mark.django_db(transaction=True)
@schema.parametrize()
@hypothesis.settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(hypothesis.HealthCheck),
)
def test_no_server_errors_and_every_answer_fits_the_schema(case, world):
    aim(case, world)
    case.call_and_validate(
        headers=world["headers"], checks=[not_a_server_error, response_schema_conformance]
    )
    assert Operation.objects.filter(pk=world["operations"]).exists()


# --- hostile JSON at every entry point -----------------------------------------------------
#
# Schemathesis above sends what the document allows and a little more; these send what
# attackers send: NaN and the infinities, numbers that overflow, lone surrogates, NUL,
# nesting deeper than Python recurses, huge integers, wrong types. Every POST endpoint
# of the document is covered (a new one is fuzzed without a change here), then the
# reviewer's edit form, the audit search's page links and the pages' query strings.


class Raw(str):
    """JSON text written as it is: what ``json.dumps`` will not write."""


def dump(value) -> str:
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{dump(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(dump(v) for v in value) + "]"
    return json.dumps(value)  # NaN and Infinity as such; lone surrogates as \ud800


HOSTILE = [
    Raw("NaN"),
    Raw("-Infinity"),
    Raw("1e999"),
    Raw('"\\ud800"'),
    Raw('"x\\udfffy"'),
    Raw('"\\u0000"'),
    Raw("9" * 5000),
    2**63,
    -(2**63) - 1,
    10**100,
]
deep = st.sampled_from([21, 3000, 100_000]).map(lambda n: Raw("[" * n + "]" * n))
leaves = st.one_of(
    st.sampled_from(HOSTILE),
    st.floats(),
    st.integers(),
    st.text(max_size=20),
    st.booleans(),
    st.none(),
)
values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
# Values with a hostile value somewhere: every leaf is one.
hostile = st.recursive(
    st.sampled_from(HOSTILE) | deep,
    lambda inner: (
        st.lists(inner, min_size=1, max_size=3)
        | st.dictionaries(st.text(max_size=5), inner, min_size=1, max_size=3)
    ),
    max_leaves=4,
)


def resolve(node: dict) -> dict:
    ref = node.get("$ref")
    return resolve(schema.raw_schema["components"]["schemas"][ref.split("/")[-1]]) if ref else node


def body_schema(path: str) -> dict:
    content = schema.raw_schema["paths"][path]["post"]["requestBody"]["content"]
    return resolve(content["application/json"]["schema"])


def plausible(name: str, node: dict, world: dict):
    """A value the schema allows, or near it; ids, versions and hashes often real ones."""
    node = resolve(node)
    if name in world["named"]:
        return st.one_of(*[st.just(world["named"][name])] * 3, st.integers())
    if "enum" in node:
        return st.sampled_from(node["enum"])
    if "anyOf" in node:
        return st.one_of([plausible("", option, world) for option in node["anyOf"]])
    kind = node.get("type")
    if kind == "integer":
        return st.one_of(*[st.sampled_from(world["integers"])] * 3, st.integers())
    if kind == "string":
        known = [text for text in world["strings"] if re.fullmatch(node.get("pattern", ".*"), text)]
        return st.one_of(*[st.sampled_from(known)] * 3, st.text(min_size=1, max_size=30))
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "object":
        return st.dictionaries(st.text(max_size=5), values, max_size=3)
    return values  # Any


@st.composite
def bodies(draw, path: str, spoilt: str, world: dict) -> str:
    """A body for the POST at ``path`` whose member ``spoilt`` (inside it, if an
    object) is hostile, the others plausible (optional ones sometimes left out); or,
    for ``spoilt`` "body", a hostile value instead of the body."""
    if spoilt == "body":
        return dump(draw(hostile))
    node = body_schema(path)
    properties = node.get("properties", {})
    members = {name: plausible(name, member, world) for name, member in properties.items()}
    required = {name: members.pop(name) for name in node.get("required", [])}
    body = draw(st.fixed_dictionaries(required, optional=members))
    value = draw(hostile)
    if resolve(properties.get(spoilt, {})).get("type") == "object":
        value = {draw(st.text(max_size=5)): value}  # Still an object: past the type check.
    body[spoilt] = value
    return dump(body)


# Every member of every POST body in the document, an unknown member, and the body itself.
SPOILS = [
    (path, spoilt)
    for path, item in schema.raw_schema["paths"].items()
    if "post" in item
    for spoilt in [*body_schema(path).get("properties", {}), "unknown", "body"]
]
FUZZ = hypothesis.settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(hypothesis.HealthCheck),
)


def everything() -> tuple:
    return stored(), Artifact.objects.count(), CheckpointArtifact.objects.count()


@pytest.fixture
def staged(api, reviewer) -> dict:
    """A run of the token with a claimed agent-executed operation whose intent is
    recorded, an approved one, and an open human request: the states the endpoints act
    on."""
    session = api.post("/sessions", {"title": "fuzz"}).json()["id"]
    run = api.post("/runs", {"session": session, "goal": "fuzz"}).json()["id"]
    ops = []
    for call in ("claimed", "approved"):
        op_id = api.propose(run, agent_proposal(call)).json()["id"]
        decide_on(Operation.objects.get(pk=op_id), reviewer)
        ops.append(op_id)
    assert api.post(f"/operations/{ops[0]}/claim", {}).status_code == 200
    assert api.post(f"/operations/{ops[0]}/intent", {"epoch": 1}).status_code == 200
    # On a run of its own: the open request makes its run wait for the answer.
    asking = api.post("/runs", {"session": session, "goal": "ask"}).json()["id"]
    asked = api.post(f"/runs/{asking}/requests", {"prompt": "Ship it?"}).json()["id"]
    version = api.run_version(run)
    return {
        "runs": [run],
        "operations": ops,
        "requests": [asked],
        "integers": [0, 1, session, run, version],
        "strings": ["x", "text/plain", sha256_hex(b"x"), "eA=="],
        # Members whose right value the document cannot say.
        "named": {"session": session, "base_version": version, "epoch": 1},
    }


@pytest.mark.django_db
@pytest.mark.parametrize(("path", "spoilt"), SPOILS)
def test_no_hostile_body_gets_a_server_error_or_leaves_anything_behind(api, staged, path, spoilt):
    ids = staged.get(path.removeprefix(PREFIX).split("/")[1], [])  # runs, operations…

    @FUZZ
    @given(body=bodies(path, spoilt, staged), pk=st.sampled_from([*ids * 2, 0, 2**64]))
    def fuzz(body: str, pk: int):
        with transaction.atomic():  # Rolled back: each example starts from the same state.
            before = everything()
            path_pk = path.removeprefix(PREFIX).replace("{pk}", str(pk))
            response = api.post(path_pk, raw=body.encode())
            assert response.status_code < 500, response.content
            if response.status_code >= 400:
                assert {"error", "detail", "field", "request_id"} == set(response.json())
            if response.status_code in (400, 413, 422):
                assert everything() == before, response.json()
            transaction.set_rollback(True)

    fuzz()


def edit_texts():
    """What a reviewer could paste as the edited arguments."""
    objects = st.dictionaries(st.text(max_size=5), hostile, min_size=1, max_size=3)
    return st.one_of(objects.map(dump), hostile.map(dump), st.text(max_size=50))


@pytest.mark.django_db
def test_no_edit_gets_a_server_error_or_leaves_anything_behind(client, reviewer, propose):
    client.force_login(reviewer)
    op = propose("edit-me", action="git.push", arguments={"branch": "main"}, risk="high")

    @hypothesis.settings(FUZZ, max_examples=40)
    @given(text=edit_texts())
    def fuzz(text: str):
        with transaction.atomic():
            before = everything()
            data = {"kind": "edit", "arguments_hash": op.arguments_hash, "arguments": text}
            response = client.post(f"/operations/{op.pk}/decide/", data)
            assert response.status_code in (302, 400)
            if response.status_code == 400:
                assert everything() == before
            transaction.set_rollback(True)

    fuzz()


def link(value) -> str:
    raw = value if isinstance(value, bytes) else dump(value).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.django_db
def test_no_audit_page_link_gets_a_server_error(client, auditor, run):
    client.force_login(auditor)
    links = st.one_of(
        st.text(max_size=40), st.binary(max_size=40).map(link), values.map(link), hostile.map(link)
    )

    @hypothesis.settings(FUZZ, max_examples=40)
    @given(
        cursor=links,
        direction=st.sampled_from(["after", "before"]),
        sort=st.sampled_from([*SORTS, "bogus"]),
    )
    def fuzz(cursor: str, direction: str, sort: str):
        response = client.get("/audit/", {direction: cursor, "sort": sort})
        assert response.status_code in (200, 400)

    fuzz()


# Every query parameter a page reads: its filter forms' fields, paging and diffs.
PARAMETERS = sorted(
    {
        *RunFilter.base_fields,
        *QueueFilter.base_fields,
        *AuditFilter.base_fields,
        *("page", "after", "before", "against", "since"),
    }
)


@pytest.mark.django_db
def test_no_query_string_gives_a_page_a_server_error(client, reviewer, propose):
    client.force_login(reviewer)
    op = propose("shown")
    attach_artifact(run=op.run, name="a.txt", content=b"a", actor=Actor.agent("x"))
    ref = CheckpointArtifact.objects.get()
    pages = [
        "/runs/",
        "/approvals/",
        "/audit/",
        "/audit/export.csv",
        f"/operations/{op.pk}/",
        f"/runs/{op.run_id}/",
        f"/audit/checkpoints/{ref.checkpoint_id}/",
        f"/audit/artifacts/{ref.pk}/",
    ]
    garbage = st.one_of(
        st.text(max_size=30),
        st.integers().map(str),
        st.sampled_from(["9999-12-31", "0000-00-00", "1e999", "NaN", "-1", "²", "1" * 30]),
    )

    @hypothesis.settings(FUZZ, max_examples=50)
    @given(page=st.sampled_from(pages), query=st.dictionaries(st.sampled_from(PARAMETERS), garbage))
    def fuzz(page: str, query: dict):
        response = client.get(page, query)
        if response.streaming:
            b"".join(response.streaming_content)
        assert response.status_code < 500

    fuzz()
