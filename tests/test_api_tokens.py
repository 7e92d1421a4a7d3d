"""Agent tokens: who may call the API, and that a token never reaches another project."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from runs.actors import Actor
from runs.models import AgentToken, Session
from runs.services.artifacts import attach_artifact
from tests.api_helpers import CALLS, Api, calls, problem, send
from tests.helpers import stored

pytest_plugins = ["tests.api_helpers"]


@pytest.fixture
def targets(run, propose):
    """Our project's run, operation, session and artifact."""
    op = propose("call-1")
    artifact = attach_artifact(run=run, name="a.txt", content=b"ours", actor=Actor.agent("x"))
    return calls(run.pk, op.pk, run.session_id, artifact.sha256)


def without_token() -> Api:
    return Api(None)


def unknown_token(agent_token) -> Api:
    return Api(f"ovs_{agent_token.prefix}_not-the-secret")


def made_up_token(agent_token) -> Api:
    return Api("ovs_0123456789_whatever")


def malformed_token(agent_token) -> Api:
    return Api("not-a-token")


def revoked_token(agent_token) -> Api:
    agent_token.revoke()
    return Api(agent_token.plain)


@pytest.mark.parametrize(
    "credential", [unknown_token, made_up_token, malformed_token, revoked_token]
)
@pytest.mark.parametrize("name", CALLS)
def test_bad_tokens_are_refused_everywhere(agent_token, targets, credential, name):
    method, path, body = targets[name]
    before = stored()
    response = send(credential(agent_token), method, path, body)
    assert problem(response, 401)["error"] == "unauthenticated"
    assert stored() == before


@pytest.mark.parametrize("name", CALLS)
def test_no_token_is_refused_everywhere(targets, name):
    method, path, body = targets[name]
    assert send(without_token(), method, path, body).status_code == 401


def test_opening_a_session_needs_a_token(agent_token):
    assert without_token().post("/sessions", {"title": "x"}).status_code == 401
    assert revoked_token(agent_token).post("/sessions", {"title": "x"}).status_code == 401
    assert not Session.objects.exists()


@pytest.mark.parametrize("name", CALLS)
def test_another_projects_token_finds_nothing(other_api, targets, name):
    method, path, body = targets[name]
    before = stored()
    response = send(other_api, method, path, body)
    assert problem(response, 404)["error"] == "not_found"
    assert stored() == before


def test_a_run_cannot_retry_another_projects_run(other_api, other_run, run):
    body = {"session": other_run.session_id, "goal": "Again", "retry_of": run.pk}
    problem(other_api.post("/runs", body), 404)


def test_a_token_sees_its_own_project(api, run):
    response = api.get(f"/runs/{run.pk}")
    assert response.status_code == 200
    assert response.json()["id"] == run.pk


def test_last_use_is_recorded(api, agent_token, run, django_capture_on_commit_callbacks):
    assert agent_token.last_used_at is None
    with django_capture_on_commit_callbacks(execute=True):  # Noted after the request's.
        api.get(f"/runs/{run.pk}")
    agent_token.refresh_from_db()
    assert timezone.now() - agent_token.last_used_at < timedelta(seconds=10)


@pytest.mark.parametrize(("age", "rewritten"), [(10, False), (120, True)])
def test_last_use_is_written_at_most_once_a_minute(
    api, agent_token, run, age, rewritten, django_capture_on_commit_callbacks
):
    earlier = timezone.now() - timedelta(seconds=age)
    AgentToken.objects.filter(pk=agent_token.pk).update(last_used_at=earlier)
    with django_capture_on_commit_callbacks(execute=True):
        api.get(f"/runs/{run.pk}")
    agent_token.refresh_from_db()
    assert (agent_token.last_used_at != earlier) is rewritten


def test_a_revoked_token_stays_revoked_and_others_still_work(project, owner, agent_token, run):
    _, second = AgentToken.issue(project=project, name="second", owner=owner)
    agent_token.revoke()
    assert Api(agent_token.plain).get(f"/runs/{run.pk}").status_code == 401
    session = Api(second).post("/sessions", {"title": "Still working"})
    assert session.status_code == 201
    started = Api(second).post("/runs", {"session": session.json()["id"], "goal": "Go on"})
    assert Api(second).get(f"/runs/{started.json()['id']}").status_code == 200


# --- create_agent_token ----------------------------------------------------------------


def create_token(*args: str) -> str:
    out = StringIO()
    call_command("create_agent_token", *args, stdout=out)
    return out.getvalue().strip()


def test_create_agent_token_prints_a_token_that_works(project, owner):
    plain = create_token(
        "--project", "acme", "--name", "bot", "--issued-by", "owner", "--owner", "owner"
    )
    assert plain.startswith("ovs_")
    response = Api(plain).post("/sessions", {"title": "hello"})
    assert response.status_code == 201
    assert response.json()["owner"] == "owner"
    token = AgentToken.objects.get(name="bot")
    assert (token.project, token.owner) == (project, owner)
    assert plain not in token.secret_hash


def test_create_agent_token_for_another_member_acts_once_they_accept(project, owner, admin_user):
    out, err = StringIO(), StringIO()
    args = ["--project", "acme", "--name", "bot", "--issued-by", "admin", "--owner", "owner"]
    call_command("create_agent_token", *args, stdout=out, stderr=err)
    agent = Api(out.getvalue().strip())

    assert err.getvalue() == "it acts once owner accepts it\n"
    assert agent.post("/sessions", {"title": "hello"}).status_code == 401
    token = AgentToken.objects.get(name="bot")
    assert token.issued_by == admin_user and token.accept()
    assert agent.post("/sessions", {"title": "hello"}).status_code == 201


def test_create_agent_token_finds_the_project_by_name_and_makes_an_owner(project, run, admin_user):
    plain = create_token("--project", "Acme", "--name", "bot", "--issued-by", "admin")
    token = AgentToken.objects.get(name="bot")
    assert (token.owner.username, token.issued_by) == ("agent-acme-bot", admin_user)
    response = Api(plain).post("/sessions", {"title": "hello"})
    assert response.status_code == 201
    assert response.json()["owner"] == "agent-acme-bot"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--project", "nope", "--name", "bot"], "no project 'nope'"),
        (["--project", "acme", "--name", "test-agent"], "already has a token named"),
        (["--project", "acme", "--name", "bot", "--owner", "ghost"], "no member 'ghost'"),
        # A user of another project gets the same answer: nothing about them is revealed.
        (["--project", "acme", "--name", "bot", "--owner", "outsider"], "no member 'outsider'"),
    ],
)
def test_create_agent_token_refuses_clearly(agent_token, outsider, args, message):
    with pytest.raises(CommandError, match=message):
        create_token(*args, "--issued-by", "owner")
    assert AgentToken.objects.count() == 1


@pytest.mark.parametrize(
    ("issuer", "message"),
    [
        (None, "the following arguments are required: --issued-by"),
        ("ghost", "issued-by: no active user 'ghost'"),
    ],
)
def test_create_agent_token_names_its_issuer(agent_token, issuer, message):
    issued_by = ["--issued-by", issuer] if issuer else []
    with pytest.raises(CommandError, match=message):
        create_token("--project", "acme", "--name", "bot", *issued_by)
    assert AgentToken.objects.count() == 1
