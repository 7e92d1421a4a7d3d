"""Numbers survive the database: what is hashed is what either backend gives back.

PostgreSQL's jsonb writes 1e16 back as 10000000000000000 and has no -0.0; SQLite keeps
the text. Numbers are read in the form both keep (``runs.canonical``), so a checkpoint's
hash recomputed from its row still matches (no false tamper alarm), an operation's
``arguments_hash`` still matches its arguments, and an agent's idempotent retry finds its
operation instead of a 409. An integer too long to read back is refused, naming where."""

import json
import math
import sys
from io import StringIO

import hypothesis
import pytest
from django.core.management import call_command
from django.db import transaction
from hypothesis import example, given
from hypothesis import strategies as st

from runs.canonical import canonical_json, json_hash
from runs.jsonsafe import parse
from runs.models import Decision, Message, Operation
from tests.api_helpers import agent_proposal, problem
from tests.helpers import decide_on, stored

pytest_plugins = ["tests.api_helpers"]

HOLE = "@@number@@"  # Where a number's JSON text goes in a body.
# What the agent writes, and the number as stored and hashed (as PostgreSQL gives it back).
AWKWARD = "[1e16, -0.0, 1.5e300, 1E+2, -1e16, 1e23, 18446744073709551617]"
KEPT = (
    f"[10000000000000000,0.0,15{'0' * 299},100.0,-10000000000000000,1{'0' * 23},"
    "18446744073709551617]"
)
TOO_LONG = "9" * (sys.get_int_max_str_digits() + 1)


def with_value(body: dict, text: str) -> bytes:
    return json.dumps(body).replace(json.dumps(HOLE), text).encode()


def chain_verifies() -> bool:
    """Whether ``verify_audit_chain`` passes (it exits 1 naming a broken link)."""
    try:
        call_command("verify_audit_chain", stdout=StringIO(), stderr=StringIO())
    except SystemExit:
        return False
    return True


def floats_in(value):
    if isinstance(value, float):
        yield value
    elif isinstance(value, list | dict):
        for child in value.values() if isinstance(value, dict) else value:
            yield from floats_in(child)


def kept_by_every_backend(value) -> bool:
    """No float PostgreSQL would give back otherwise: none of 1e16 or more (written back
    in digits, an int to Python), no negative zero."""
    return all(abs(f) < 1e16 and (f or math.copysign(1, f) > 0) for f in floats_in(value))


@pytest.mark.parametrize(
    ("sent", "kept"),
    [
        ("1e16", "10000000000000000"),
        ("-1E16", "-10000000000000000"),
        ("1.5e300", "15" + "0" * 299),
        ("1e23", "1" + "0" * 23),
        ("-0.0", "0.0"),
        ("-0", "0"),
        ("1.0", "1.0"),
        ("1E+2", "100.0"),
        ("0.1", "0.1"),
        ("1e-7", "1e-07"),
        ("9999999999999998.0", "9999999999999998.0"),
        ("18446744073709551617", "18446744073709551617"),
    ],
)
def test_a_number_is_read_as_postgresql_gives_it_back(sent, kept):
    assert canonical_json(parse(sent, field="n")) == kept.encode()


# --- a property: any JSON number, anywhere in a value ----------------------------------------

literals = st.builds(
    lambda *parts: "".join(parts),
    st.sampled_from(["", "-"]),
    st.integers(0, 10**20).map(str),
    st.one_of(st.just(""), st.integers(0, 10**6).map(lambda n: f".{n}")),
    st.one_of(
        st.just(""),
        st.builds(
            "{}{}{}".format,
            st.sampled_from("eE"),
            st.sampled_from(["", "+", "-"]),
            st.integers(0, 280),
        ),
    ),
)
numbers = st.one_of(
    literals,
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.integers(-(2**80), 2**80).map(str),
)
values = st.recursive(
    numbers,
    lambda inner: (
        st.lists(inner, max_size=3).map(lambda items: f"[{','.join(items)}]")
        | st.dictionaries(st.text("abz", max_size=2), inner, max_size=3).map(
            lambda members: "{" + ",".join(f'"{k}":{v}' for k, v in members.items()) + "}"
        )
    ),
    max_leaves=6,
)
# Derandomized: the same examples on every run and backend (and no example database).
PROPERTY = hypothesis.settings(max_examples=50, deadline=None, derandomize=True)


def test_any_json_number_hashes_the_same_read_back_from_the_database(api, run):
    """Proposed (arguments, the checkpoint's state) and sent as a message (payload),
    every number is stored so that each hash recomputed from the row read back equals
    the one stored, the retry finds the same operation, and the chain verifies; and the
    row holds no number PostgreSQL would change (SQLite keeps any text: there, that is
    what shows a value that would not survive PostgreSQL)."""
    version = api.run_version(run.pk)

    @PROPERTY
    @given(value=values)
    @example(value=AWKWARD)
    @example(value='{"a": [-0.0, {"b": 1e16}], "z": 5e-324}')
    def store_and_read_back(value: str):
        with transaction.atomic():  # Rolled back: each example starts from the same run.
            body = agent_proposal("numbers", arguments={"n": HOLE}, base_version=version)
            proposed = api.post(f"/runs/{run.pk}/operations", raw=with_value(body, value))
            assert proposed.status_code == 201, proposed.content
            op = Operation.objects.get(pk=proposed.json()["id"])
            assert json_hash(op.proposed_arguments) == op.arguments_hash
            assert json_hash(op.arguments) == op.arguments_hash
            assert kept_by_every_backend(op.arguments), op.arguments

            again = api.post(f"/runs/{run.pk}/operations", raw=with_value(body, value))
            assert (again.status_code, again.json()["id"]) == (200, op.pk), again.content

            said = {"payload": {"text": "numbers", "data": {"n": HOLE}}}
            assert (
                api.post(f"/runs/{run.pk}/messages", raw=with_value(said, value)).status_code == 201
            )
            message = Message.objects.get(run=run)
            assert json_hash(message.payload) == message.payload_sha256
            assert kept_by_every_backend(message.payload)

            assert chain_verifies()
            transaction.set_rollback(True)

    store_and_read_back()


# --- what the agent and the reviewer notice --------------------------------------------------


def test_a_retried_proposal_with_1e16_and_minus_zero_is_the_same_operation(api, run):
    body = agent_proposal("big", arguments={"n": HOLE}, base_version=run.version)

    first = api.post(f"/runs/{run.pk}/operations", raw=with_value(body, AWKWARD))
    retry = api.post(f"/runs/{run.pk}/operations", raw=with_value(body, AWKWARD))

    assert first.status_code == 201, first.content
    assert retry.status_code == 200, retry.content  # Not 409: the same arguments.
    assert retry.json()["id"] == first.json()["id"]
    assert canonical_json(retry.json()["arguments"]) == f'{{"n":{KEPT}}}'.encode()
    assert chain_verifies()


def test_an_agent_executed_operation_records_such_numbers_and_its_chain_verifies(
    api, run, reviewer
):
    op = Operation.objects.get(pk=api.propose(run.pk, agent_proposal()).json()["id"])
    decide_on(op, reviewer)
    assert api.post(f"/operations/{op.pk}/claim", {}).status_code == 200
    intent = {"epoch": 1, "snapshot": {"n": HOLE}}
    report = {"epoch": 1, "effect": "applied", "output": {"n": HOLE}}

    assert (
        api.post(f"/operations/{op.pk}/intent", raw=with_value(intent, AWKWARD)).status_code == 200
    )
    answer = api.post(f"/operations/{op.pk}/report", raw=with_value(report, AWKWARD))

    assert answer.status_code == 200, answer.content
    op.refresh_from_db()
    assert canonical_json(op.intent) == f'{{"n":{KEPT}}}'.encode()
    assert canonical_json(op.result["output"]) == f'{{"n":{KEPT}}}'.encode()
    assert chain_verifies()


def test_a_reviewers_edit_with_1e16_is_hashed_as_stored(client, reviewer, propose):
    client.force_login(reviewer)
    op = propose("edit-me", action="git.push", arguments={"branch": "main"})
    edited = with_value({"branch": "main", "n": HOLE}, AWKWARD).decode()

    response = client.post(
        f"/operations/{op.pk}/decide/",
        {"kind": "edit", "arguments_hash": op.arguments_hash, "arguments": edited},
    )

    assert response.status_code == 302
    op.refresh_from_db()
    decision = Decision.objects.get(operation=op)
    assert json_hash(op.arguments) == op.arguments_hash == decision.arguments_hash
    assert canonical_json(op.arguments["n"]) == KEPT.encode()
    assert chain_verifies()


@pytest.mark.parametrize(
    ("where", "field"),
    [("arguments", "arguments.n.1"), ("payload", "payload.data.n.1")],
)
def test_an_integer_too_long_to_read_back_is_refused_naming_where(api, run, where, field):
    value = f"[1, {TOO_LONG}]"
    if where == "arguments":
        path, body = f"/runs/{run.pk}/operations", agent_proposal(arguments={"n": HOLE})
        body["base_version"] = run.version
    else:
        path, body = f"/runs/{run.pk}/messages", {"payload": {"text": "x", "data": {"n": HOLE}}}
    before = stored()

    response = api.post(path, raw=with_value(body, value))

    answer = problem(response, 422, field)
    assert f"{len(TOO_LONG)} digits could not be read back" in answer["detail"]
    assert stored() == before


def test_an_edit_with_an_integer_too_long_to_read_back_is_a_form_error(client, reviewer, propose):
    client.force_login(reviewer)
    op = propose("edit-me", action="git.push", arguments={"branch": "main"})
    before = stored()

    response = client.post(
        f"/operations/{op.pk}/decide/",
        {
            "kind": "edit",
            "arguments_hash": op.arguments_hash,
            "arguments": with_value({"branch": HOLE}, TOO_LONG).decode(),
        },
    )

    assert response.status_code == 400
    assert f"branch: An integer of {len(TOO_LONG)} digits could not be read back" in response.text
    assert stored() == before
