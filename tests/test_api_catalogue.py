"""The action catalogue (``GET /actions``) and the OpenAPI document's argument schemas:
an agent can learn what Oversight executes, with what arguments, rolled back how, and
what is checked before it fires."""

import pytest

from tests.api_helpers import Api, problem

pytest_plugins = ["tests.api_helpers"]


@pytest.fixture
def catalogue(api) -> dict[str, dict]:
    response = api.get("/actions")
    assert response.status_code == 200, response.content
    return {action["name"]: action for action in response.json()}


def test_every_registered_action_is_described(catalogue):
    assert sorted(catalogue) == ["email.send", "file.write", "http.request", "ledger.transfer"]
    for action in catalogue.values():
        assert action["executor"] == "server"
        assert action["description"] and action["precondition"]
        assert action["arguments_schema"]["type"] == "object"
    assert catalogue["http.request"]["rollback_kinds"] == ["compensating", "out_of_band"]
    assert catalogue["file.write"]["rollback_kinds"] == ["in_band"]


def test_the_catalogue_says_what_a_file_write_precondition_needs(catalogue):
    write = catalogue["file.write"]
    assert "expected_sha256" in write["precondition"]
    schema = write["arguments_schema"]
    assert sorted(schema["required"]) == ["content", "expected_sha256", "path"]
    assert schema["additionalProperties"] is False


def test_argument_names_are_the_ones_a_proposal_sends(catalogue):
    transfer = catalogue["ledger.transfer"]["arguments_schema"]
    assert {"from", "to", "amount"} <= set(transfer["properties"])
    http = catalogue["http.request"]["arguments_schema"]
    assert http["properties"]["verify"]["$ref"] == "#/$defs/Expectation"
    assert "Expectation" in http["$defs"]


def test_the_openapi_document_references_each_actions_arguments(api):
    document = api.get("/openapi.json").json()
    schemas = document["components"]["schemas"]
    refs = [
        option.get("$ref") for option in schemas["ProposalIn"]["properties"]["arguments"]["anyOf"]
    ]
    assert refs[:-1] == [
        f"#/components/schemas/Arguments.{name}"
        for name in ("email.send", "file.write", "http.request", "ledger.transfer")
    ]
    verify = schemas["Arguments.http.request"]["properties"]["verify"]["$ref"]
    assert verify == "#/components/schemas/Arguments.http.request.Expectation"
    assert "Arguments.http.request.Expectation" in schemas
    assert "/api/v1/actions" in document["paths"]


def test_the_catalogue_needs_a_token():
    problem(Api(None).get("/actions"), 401)
