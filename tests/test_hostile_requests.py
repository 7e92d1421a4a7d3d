"""Human requests attacked as an outsider would (#34): JSON Schemas made to cost a
validator time or memory without bound, agents of another project reaching for a
request, kinds that contradict their fields, and one answer posted twice. A schema is
refused at creation with a 4xx that says why, or accepted and checked in bounded time;
another project's request is not found; the first answer stands."""

import time
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from runs.answer_fields import answer_fields
from runs.errors import InvalidInput
from runs.jsonsafe import Refused
from runs.models import Checkpoint, HumanRequest
from runs.services import requests as service
from tests.api_helpers import Api, problem
from tests.conftest import AGENT
from tests.test_views_requests import errors, post_answer

pytest_plugins = ["tests.api_helpers"]

# Well above what each check takes once bounded, well below what it took before.
BOUNDED_SECONDS = 2.0


def ask(api: Api, run, schema, **fields):
    body = {"prompt": "What should we order?", "answer_schema": schema, **fields}
    return api.post(f"/runs/{run.pk}/requests", body)


def timed(call):
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


def definitions(count: int, each) -> dict:
    """A schema whose definition ``a{i}`` is ``each(next)``, ``next`` naming ``a{i+1}``;
    the last is a string; the schema is the first."""
    defs = {f"a{i}": each({"$ref": f"#/$defs/a{i + 1}"}) for i in range(count)}
    defs[f"a{count}"] = {"type": "string"}
    return {"$defs": defs, "$ref": "#/$defs/a0"}


@pytest.fixture
def data_request(api, run):
    """A data request of ``run`` asked through the API with ``schema``."""

    def make(schema) -> HumanRequest:
        response = ask(api, run, schema)
        assert response.status_code == 201, response.content
        return HumanRequest.objects.get(pk=response.json()["id"])

    return make


def answer_in_json(client, human: HumanRequest, value: str):
    return post_answer(client, human, "answer", using="json", value=value)


# --- schemas that would cost without bound -----------------------------------------------


def test_a_ref_chain_hundreds_deep_is_followed_and_checks_the_answer(
    data_request, client, reviewer
):
    human = data_request(definitions(300, lambda ref: ref))
    client.force_login(reviewer)

    refused = answer_in_json(client, human, "5")
    assert refused.status_code == 400
    assert errors(refused.text) == ["data: 5 is not of type &quot;string&quot;"]
    assert answer_in_json(client, human, '"pens"').status_code == 302


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#"},
        {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
        {
            "$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}},
            "properties": {"x": {"$ref": "#/$defs/a"}},
        },
    ],
    ids=["root", "two definitions", "through allOf"],
)
def test_a_ref_cycle_that_never_reaches_into_the_answer_is_refused(api, run, schema):
    """A validator would go round it forever on one value (jsonschema-rs lets any answer
    through instead): it says nothing an answer could be checked against."""
    body = problem(ask(api, run, schema), 422, "answer_schema")
    assert "$ref cycle" in body["detail"]
    assert not HumanRequest.objects.exists()


def test_a_recursive_schema_that_reaches_into_the_answer_is_accepted(
    data_request, client, reviewer
):
    parts = {"type": "array", "items": {"$ref": "#"}}
    tree = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "parts": parts},
        "required": ["name"],
    }
    human = data_request(tree)
    client.force_login(reviewer)

    refused = answer_in_json(client, human, '{"name": "kit", "parts": [{"parts": []}]}')
    assert errors(refused.text) == ["data.parts.0: &quot;name&quot; is a required property"]
    answer = '{"name": "kit", "parts": [{"name": "pen", "parts": [{"name": "cap"}]}]}'
    assert answer_in_json(client, human, answer).status_code == 302


@pytest.mark.parametrize("keyword", ["anyOf", "oneOf", "allOf"])
def test_refs_that_multiply_are_refused_at_once(api, run, keyword):
    """Thirty definitions each naming the next twice: a kilobyte and a half of schema a
    validator unfolds into 2**30 checks of one value (hours of CPU)."""
    schema = definitions(30, lambda ref: {keyword: [ref, ref]})

    response, seconds = timed(lambda: ask(api, run, schema))

    body = problem(response, 422, "answer_schema")
    assert "too costly to check" in body["detail"]
    assert seconds < BOUNDED_SECONDS
    assert not HumanRequest.objects.exists()


class Address(BaseModel):
    street: str
    city: str
    postcode: str | None = Field(default=None, pattern=r"^[0-9A-Z -]{3,10}$")


class Order(BaseModel):
    item: str
    quantity: int = Field(ge=1)
    colour: Literal["red", "blue"]
    ship_to: Address
    bill_to: Address | None = None
    notes: list[str] = []


ANY_JSON = {
    "$defs": {
        "value": {
            "anyOf": [
                {"type": ["string", "number", "boolean", "null"]},
                {"type": "array", "items": {"$ref": "#/$defs/value"}},
                {"type": "object", "additionalProperties": {"$ref": "#/$defs/value"}},
            ]
        }
    },
    "$ref": "#/$defs/value",
}


@pytest.mark.parametrize(
    "schema",
    [
        Order.model_json_schema(),
        ANY_JSON,
        {"type": "object", "properties": {"left": {"$ref": "#"}, "right": {"$ref": "#"}}},
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "definitions": {"point": {"type": "array", "items": [{"type": "number"}] * 2}},
            "type": "array",
            "items": {"$ref": "#/definitions/point"},
        },
    ],
    ids=["pydantic model", "any JSON value", "binary tree", "draft 7 tuples"],
)
def test_schemas_agents_write_are_accepted(data_request, schema):
    """A member has one name and an item one place, and a value is an object or an
    array: a schema of any JSON value, or of a binary tree, costs as much at each depth
    of the answer as at the first, however deep it goes."""
    assert data_request(schema).kind == "data"


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        (
            {"$defs": {"a": {"$anchor": "here", "type": "string"}}, "$ref": "#here"},
            "$ref '#here': only a JSON Pointer within the schema",
        ),
        (
            {"$dynamicAnchor": "node", "items": {"$dynamicRef": "#node"}},
            "$dynamicRef: not followed here; use $ref",
        ),
        (
            {
                "properties": {
                    "x": {
                        "$id": "https://example.com/x",
                        "$defs": {"y": {"type": "string"}},
                        "$ref": "#/$defs/y",
                    }
                }
            },
            "$id: only at the top of the schema",
        ),
    ],
    ids=["anchor", "dynamic reference", "nested resource"],
)
def test_what_the_cost_cannot_be_told_of_is_refused_saying_why(api, run, schema, reason):
    body = problem(ask(api, run, schema), 422, "answer_schema")
    assert reason in body["detail"]


def test_a_huge_enum_is_refused_by_size_and_a_large_one_served_in_json(
    api, run, data_request, client, reviewer
):
    problem(ask(api, run, {"enum": list(range(100_000))}), 413, "answer_schema")

    human = data_request({"enum": [f"v{i}" for i in range(30_000)]})
    assert answer_fields(human.answer_schema) is None  # Raw JSON, not 30,000 options.
    client.force_login(reviewer)
    refused, seconds = timed(lambda: answer_in_json(client, human, '"w1"'))
    assert refused.status_code == 400 and seconds < BOUNDED_SECONDS
    assert answer_in_json(client, human, '"v29999"').status_code == 302


def test_a_schema_of_megabytes_is_refused_by_size(api, run):
    schema = {"description": "x" * 3_000_000}
    response = ask(api, run, schema)
    assert response.status_code == 413, response.content
    assert not HumanRequest.objects.exists()


def test_properties_nested_too_deep_are_refused_naming_the_schema(api, run, ask_directly):
    schema: dict = {"type": "string"}
    for _ in range(30):
        schema = {"type": "object", "properties": {"x": schema}}
    body = problem(ask(api, run, schema), 422, "answer_schema")
    assert "nested deeper than" in body["detail"]

    for _ in range(2000):  # Beyond Python's recursion limit, as no API body can be.
        schema = {"type": "object", "properties": {"x": schema}}
    with pytest.raises(Refused, match="nested deeper than") as refused:
        ask_directly(schema)
    assert refused.value.field == "answer_schema"


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": "^(a*)*\\1$"},
        {"type": "string", "pattern": "^(?=a)(a+)+$"},
        {"type": "object", "patternProperties": {"^(a|aa)+(?!b)$": {}}},
        {"type": "object", "propertyNames": {"pattern": "(x+x+)+\\1"}},
    ],
    ids=["backreference", "lookahead", "in patternProperties", "in propertyNames"],
)
def test_a_pattern_that_needs_backtracking_is_refused_saying_why(api, run, schema):
    """Backreferences and lookaround need a backtracking engine, which may take time
    exponential in the answer's length; patterns here run in time linear in it."""
    body = problem(ask(api, run, schema), 422, "answer_schema")
    assert "lookaround or backreferences" in body["detail"]


def test_a_catastrophic_pattern_runs_in_linear_time(data_request, client, reviewer):
    human = data_request({"type": "array", "items": {"type": "string", "pattern": "^(a+)+$"}})
    client.force_login(reviewer)

    hostile = '["' + "a" * 5000 + '!"]'
    refused, seconds = timed(lambda: answer_in_json(client, human, hostile))
    assert refused.status_code == 400 and seconds < BOUNDED_SECONDS
    assert errors(refused.text)[0].startswith("data.0: &quot;aaaa")
    assert answer_in_json(client, human, '["aaaa"]').status_code == 302


def test_too_many_patterns_are_refused_before_they_are_compiled(api, run):
    """Each compiles to up to a quarter of a megabyte: thousands would take seconds and
    gigabytes before a single answer."""
    schema = {"anyOf": [{"pattern": f"^x{i}[a-z]{{1,300}}$"} for i in range(2000)]}
    response, seconds = timed(lambda: ask(api, run, schema))
    body = problem(response, 422, "answer_schema")
    assert "patterns" in body["detail"]
    assert seconds < BOUNDED_SECONDS


def test_an_answer_with_many_problems_is_refused_in_bounded_time(data_request, client, reviewer):
    """Listing every problem builds each one: 10,000 values that each fail 100 checks
    were a million problems and ten seconds; the first one is enough."""
    human = data_request({"type": "array", "items": {"allOf": [{"type": "string"}] * 100}})
    client.force_login(reviewer)

    refused, seconds = timed(lambda: answer_in_json(client, human, str([0] * 10_000)))

    assert refused.status_code == 400 and seconds < BOUNDED_SECONDS
    assert errors(refused.text) == ["data.0: 0 is not of type &quot;string&quot;"]
    human.refresh_from_db()
    assert human.status == "open"


def test_a_small_answer_still_hears_of_each_problem(data_request, reviewer):
    schema = {
        "type": "object",
        "properties": {"item": {"type": "string"}, "quantity": {"type": "integer", "minimum": 1}},
    }
    human = data_request(schema)
    with pytest.raises(InvalidInput) as refused:
        service.answer(
            request=human,
            reviewer=reviewer,
            kind="answer",
            version=human.version,
            data={"item": 5, "quantity": 0},
        )
    assert str(refused.value).split("; ") == [
        'data.item: 5 is not of type "string"',
        "data.quantity: 0 is less than the minimum of 1",
    ]


# --- another project's agent ------------------------------------------------------------------


@pytest.fixture
def asked(api, run) -> dict:
    body = {"prompt": "Which region?", "choices": ["eu", "us"], "external_id": "thread-1"}
    return api.post(f"/runs/{run.pk}/requests", body).json()


def test_another_projects_agent_finds_no_request_by_id_or_name(asked, other_api, run):
    pk = asked["id"]
    problem(other_api.get(f"/requests/{pk}"), 404)
    problem(other_api.get(f"/requests/{pk}", {"wait": 1}), 404)
    problem(other_api.post(f"/requests/{pk}/withdraw", {}), 404)
    problem(other_api.post(f"/runs/{run.pk}/requests", {"prompt": "Mine now?"}), 404)
    assert other_api.get("/requests", {"external_id": "thread-1"}).json() == []
    assert other_api.get("/requests", {"run": run.pk}).json() == []
    assert HumanRequest.objects.get(pk=pk).status == "open"


def test_another_projects_agent_naming_its_request_the_same_gets_its_own(
    asked, other_api, other_run
):
    body = {"prompt": "Which region?", "choices": ["eu", "us"], "external_id": "thread-1"}
    response = other_api.post(f"/runs/{other_run.pk}/requests", body)
    assert response.status_code == 201, response.content
    assert response.json()["id"] != asked["id"]
    assert response.json()["run"] == other_run.pk


def test_another_projects_agent_reads_nothing_of_the_answer_in_its_feed(asked, other_api, reviewer):
    human = HumanRequest.objects.get(pk=asked["id"])
    service.answer(request=human, reviewer=reviewer, kind="choose", version=1, data="eu")
    assert other_api.get("/events").json()["events"] == []


def test_another_projects_reviewer_may_not_answer(asked, client, outsider):
    human = HumanRequest.objects.get(pk=asked["id"])
    client.force_login(outsider)
    assert post_answer(client, human, "choose", using="choose", choice="eu").status_code == 404
    human.refresh_from_db()
    assert (human.status, human.answer) == ("open", None)


# --- one answer, posted twice ---------------------------------------------------------------


def test_the_same_data_answer_posted_twice_is_refused_the_second_time(
    data_request, client, reviewer
):
    human = data_request({"type": "object", "properties": {"quantity": {"type": "integer"}}})
    client.force_login(reviewer)
    posted = {"kind": "answer", "version": 1, "using": "json", "value": '{"quantity": 2}'}

    first = client.post(f"/requests/{human.pk}/answer/", posted)
    checkpoints = Checkpoint.objects.count()
    second = client.post(f"/requests/{human.pk}/answer/", posted)

    assert first.status_code == 302
    assert second.status_code == 400
    assert "already answered by you" in errors(second.text)[0]
    human.refresh_from_db()
    assert (human.status, human.answer, human.version) == ("answered", {"quantity": 2}, 2)
    assert Checkpoint.objects.count() == checkpoints


@pytest.fixture
def ask_directly(run, agent_token):
    """Ask through the service, as no API body could (Python's own callers)."""

    def make(schema):
        return service.ask(
            run=run, prompt="Which?", actor=AGENT, token=agent_token, answer_schema=schema
        )

    return make
