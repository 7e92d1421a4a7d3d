"""The agent API fuzzed from its own OpenAPI document (schemathesis): valid and invalid
requests to every operation, with a real token; no answer may be a server error, and
every answer must match the schema the document gives for its status."""

import zlib

import hypothesis
import pytest
import schemathesis
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from oversight.wsgi import application
from runs.actors import Actor
from runs.models import Operation
from runs.services.artifacts import attach_artifact
from runs.services.proposals import propose_operation
from tests.helpers import decide_on

pytest_plugins = ["tests.api_helpers"]

schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", application)


@pytest.fixture
def world(agent_token, run, reviewer) -> dict:
    """Objects the fuzzed paths may hit: the run, an approved agent-executed operation,
    an artifact; and the token's header."""
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
    return {
        "headers": {"Authorization": f"Bearer {agent_token.plain}"},
        "session": run.session_id,
        "runs": run.pk,
        "operations": op.pk,
        "artifacts": artifact.sha256,
    }


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
