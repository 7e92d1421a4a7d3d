"""Hostile input is refused with a reason, never a server error, and leaves nothing
behind: NaN, the infinities, numbers that overflow, lone surrogates, NUL, JSON nested
deeper than Python can recurse, text that is not UTF-8, in every API body; media types
and artifact names that would break a download's headers; the reviewer's edit form;
the audit search's page links."""

import base64
import json
from pathlib import Path

import pytest
from django.conf import settings

from runs.models import Artifact, CheckpointArtifact, Decision, Operation
from tests.api_helpers import agent_proposal, artifact_body, problem
from tests.helpers import decide_on, stored

pytest_plugins = ["tests.api_helpers"]

HOLE = "@@hostile@@"  # Where a hostile JSON fragment goes in a body.


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


# name: (JSON text, what the refusal names: the value's own path, its field, or the body)
VALUES = {
    "NaN": ("NaN", "path"),
    "Infinity": ("Infinity", "path"),
    "-Infinity": ("-Infinity", "path"),
    "1e999": ("1e999", "path"),
    "lone surrogate": ('"\\ud800"', "path"),
    "NUL": ('"a\\u0000b"', "path"),
    # Deeper than Python's recursion limit, shallow enough for the JSON parser.
    "3,000 levels": (deep(3000), "field"),
    # Deeper than the JSON parser itself can go.
    "100,000 levels": (deep(100_000), "body"),
}
STRINGS = {"lone surrogate": "lone surrogate (U+D800)", "NUL": "U+0000 (NUL)"}


def with_hole(body: dict, value: str) -> bytes:
    return json.dumps(body).replace(json.dumps(HOLE), value).encode()


@pytest.fixture
def push(api, run, reviewer) -> Operation:
    """An approved agent-executed operation of the token's run."""
    op = Operation.objects.get(pk=api.propose(run.pk, agent_proposal()).json()["id"])
    decide_on(op, reviewer)
    return op


@pytest.fixture
def claimed(api, push) -> Operation:
    assert api.post(f"/operations/{push.pk}/claim", {}).status_code == 200
    return push


@pytest.fixture
def intended(api, claimed) -> Operation:
    response = api.post(f"/operations/{claimed.pk}/intent", {"epoch": 1, "snapshot": {}})
    assert response.status_code == 200
    return claimed


def place(request, name: str) -> tuple[str, dict, str]:
    """Where a hostile value goes: (path, body with HOLE there, the field at fault)."""
    run = request.getfixturevalue("run")
    if name == "arguments":
        body = agent_proposal("hostile", arguments={"x": HOLE}, base_version=run.version)
        return f"/runs/{run.pk}/operations", body, "arguments.x"
    if name == "payload":
        return f"/runs/{run.pk}/messages", {"payload": {"text": HOLE}}, "payload.text"
    if name == "goal":
        return "/runs", {"session": run.session_id, "goal": HOLE}, "goal"
    if name == "artifact name":
        return f"/runs/{run.pk}/artifacts", artifact_body(b"x", name=HOLE), "name"
    if name == "snapshot":
        op = request.getfixturevalue("claimed")
        return f"/operations/{op.pk}/intent", {"epoch": 1, "snapshot": {"x": HOLE}}, "snapshot.x"
    op = request.getfixturevalue("intended")
    return (
        f"/operations/{op.pk}/report",
        {"epoch": 1, "effect": "applied", "output": HOLE},
        "output",
    )


def expected_field(field: str, names: str) -> str:
    if names == "body":
        return "body"
    return field.split(".")[0] if names == "field" else field


FREE_FORM = ["arguments", "payload", "snapshot", "output"]


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("where", FREE_FORM)
def test_a_hostile_json_value_is_refused_naming_its_field(api, request, where, value):
    path, body, field = place(request, where)
    text, names = VALUES[value]
    before = stored()

    response = api.post(path, raw=with_hole(body, text))

    assert response.status_code in (400, 422), response.content
    answer = problem(response, response.status_code, expected_field(field, names))
    assert stored() == before, answer


@pytest.mark.parametrize("value", STRINGS)
@pytest.mark.parametrize("where", ["goal", "artifact name"])
def test_a_string_that_is_not_storable_text_is_refused(api, request, where, value):
    path, body, field = place(request, where)
    before = stored()

    response = api.post(path, raw=with_hole(body, VALUES[value][0]))

    assert STRINGS[value] in problem(response, 422, field)["detail"]
    assert stored() == before


LOOKUPS = [
    ("/sessions", {}),
    ("/runs", {}),
    ("/operations", {}),
    ("/operations", {"run": "1"}),
    ("/requests", {}),
]


@pytest.mark.parametrize(("path", "others"), LOOKUPS)
def test_a_lookup_by_text_with_nul_is_refused(api, path, others):
    """PostgreSQL cannot compare text holding NUL (a 500 before); SQLite could."""
    field = "call_id" if others else "external_id"

    response = api.get(path, {**others, field: "a\x00b"})

    assert problem(response, 422, field)


@pytest.mark.parametrize("path", ["/operations", "/requests"])
@pytest.mark.parametrize("number", [str(2**63), str(10**30), "0", "-1"])
def test_a_lookup_by_a_run_id_no_column_holds_is_refused(api, path, number):
    others = {"call_id": "x"} if path == "/operations" else {}

    response = api.get(path, {"run": number, **others})

    assert problem(response, 422, "run")


def test_a_body_that_is_not_utf8_is_refused(api, run):
    before = stored()
    response = api.post(f"/runs/{run.pk}/messages", raw=b'{"payload": {"text": "\xff"}}')
    assert "UTF-8" in problem(response, 400, "body")["detail"]
    assert stored() == before


@pytest.mark.parametrize("where", ["snapshot", "output"])
def test_a_snapshot_or_output_over_the_size_limit_is_refused(api, request, settings, where):
    settings.OVERSIGHT_API_MAX_ARGUMENTS_BYTES = 100
    path, body, _ = place(request, where)
    before = stored()
    response = api.post(path, raw=with_hole(body, json.dumps("x" * 100)))
    assert problem(response, 413, where)["error"] == "limit_exceeded"
    assert stored() == before


# --- artifacts: media type and name ----------------------------------------------------------


@pytest.mark.parametrize(
    "media_type",
    [
        "text/plain\r\nX-Injected: 1",
        "text/plain\n",
        "text/plain; charset=utf-8",
        "text",
        "/plain",
        "text/plain/extra",
        "text/" + "x" * 100,
        "tëxt/plain",
    ],
)
def test_a_media_type_that_is_not_type_subtype_is_refused(api, run, media_type):
    before = stored()
    body = artifact_body(b"bytes", media_type=media_type)
    problem(api.post(f"/runs/{run.pk}/artifacts", body), 422, "media_type")
    assert stored() == before
    assert not Artifact.objects.exists()


def test_a_media_type_is_kept_lowercase_and_served_as_such(api, run):
    response = api.post(f"/runs/{run.pk}/artifacts", artifact_body(b"x", media_type="Text/Plain"))
    assert response.json()["media_type"] == "text/plain"
    download = api.get(f"/artifacts/{response.json()['sha256']}")
    assert download.status_code == 200
    assert download["Content-Type"].startswith("text/plain")


@pytest.mark.parametrize(
    "name", ["notes\r\n.txt", "tab\there", "bell\x07", "evil\u202etxt.exe", "zero\u200bwidth"]
)
def test_an_artifact_name_with_control_characters_is_refused(api, run, name):
    before = stored()
    body = artifact_body(b"bytes", name=name)
    problem(api.post(f"/runs/{run.pk}/artifacts", body), 422, "name")
    assert stored() == before
    assert not CheckpointArtifact.objects.exists()


def test_uploading_bytes_another_project_stored_does_the_same_work(api, run, other_api, other_run):
    """The upload answer and its cost are the same whether another project stored these
    bytes or not: the blob is written durably each time (not skipped when it exists,
    which made an upload of known bytes measurably faster)."""
    content = b"the same bytes in two projects"
    first = other_api.post(f"/runs/{other_run.pk}/artifacts", artifact_body(content))
    blob = Path(settings.OVERSIGHT_ARTIFACT_ROOT).glob(f"*/{first.json()['sha256']}")
    inode = next(blob).stat().st_ino

    second = api.post(f"/runs/{run.pk}/artifacts", artifact_body(content))

    assert second.status_code == first.status_code == 201
    assert set(second.json()) == set(first.json())
    rewritten = next(Path(settings.OVERSIGHT_ARTIFACT_ROOT).glob(f"*/{first.json()['sha256']}"))
    assert rewritten.stat().st_ino != inode
    assert rewritten.read_bytes() == content


# --- the reviewer's edit form ----------------------------------------------------------------


@pytest.fixture
def reviewing(client, reviewer, propose) -> tuple:
    client.force_login(reviewer)
    return client, propose("edit-me", action="git.push", arguments={"branch": "main"})


def edit(client, op: Operation, arguments: str):
    op.refresh_from_db()
    data = {"kind": "edit", "arguments_hash": op.arguments_hash, "arguments": arguments}
    return client.post(f"/operations/{op.pk}/decide/", data)


@pytest.mark.parametrize("value", VALUES)
def test_an_edit_with_a_hostile_json_value_is_a_form_error(reviewing, value):
    client, op = reviewing
    before = stored()

    response = edit(client, op, with_hole({"branch": HOLE}, VALUES[value][0]).decode())

    assert response.status_code == 400
    assert 'aria-invalid="true"' in response.text
    assert stored() == before


def test_an_edit_over_the_arguments_size_limit_is_a_form_error(reviewing):
    client, op = reviewing
    limit = settings.OVERSIGHT_API_MAX_ARGUMENTS_BYTES
    before = stored()

    response = edit(client, op, json.dumps({"branch": "x" * 5 * 2**20}))

    assert response.status_code == 400
    assert f"over the limit of {limit}" in response.text
    assert stored() == before
    assert not Decision.objects.exists()


def test_an_edit_nested_too_deep_says_so(reviewing):
    client, op = reviewing
    levels = settings.OVERSIGHT_API_MAX_DEPTH
    before = stored()
    response = edit(client, op, json.dumps({"branch": json.loads(deep(levels))}))
    assert f"Nested deeper than {levels} levels" in response.text
    assert response.status_code == 400
    assert stored() == before
    assert not Decision.objects.exists()


# --- the audit search's page links -----------------------------------------------------------


def cursor(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize(
    "link",
    [
        cursor(deep(100_000)),
        cursor(deep(3000)),
        cursor('["NaN", 1e999]'),
        cursor('["\\ud800", 1]'),
        cursor(b"\xff\xfe"),
        cursor("[1, 2, 3]"),
        cursor('{"a": 1, "b": 2}'),
        "not base64 at all!",
        "é",
    ],
)
@pytest.mark.parametrize("direction", ["after", "before"])
@pytest.mark.parametrize("sort", ["newest", "run"])
def test_a_garbage_audit_cursor_shows_the_first_page_with_a_message(
    client, auditor, run, direction, link, sort
):
    client.force_login(auditor)
    response = client.get("/audit/", {direction: link, "sort": sort})
    assert response.status_code == 400
    assert "This page link is not valid any more" in response.text
