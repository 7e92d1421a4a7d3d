"""Four eyes through tokens (#11, hole 3): a token acts only on the sessions it opened
and their runs, a reviewer never decides on what a token acting for them proposed,
and a token acts only for a member of its project.

Agent A is the test agent (its token opened ``session``, owned by ``owner``); agent B
is another token of the same project, acting for ``reviewer`` (X)."""

import time
from io import StringIO

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from runs.management.commands.demo import Command as DemoCommand
from runs.models import AgentToken, Membership, Operation, Project, Role, Run, Session
from runs.permissions import role_group
from runs.services.artifacts import attach_artifact
from runs.services.requests import ask
from runs.services.runs import finish_run
from tests.api_helpers import CALLS, Api, calls, problem, send
from tests.conftest import AGENT, issued
from tests.helpers import post_decision, stored

pytest_plugins = ["tests.api_helpers"]


@pytest.fixture
def token_b(project, reviewer) -> AgentToken:
    return issued(project, "agent-b", reviewer)


@pytest.fixture
def api_b(token_b) -> Api:
    return Api(token_b.plain)


@pytest.fixture
def a_targets(run, propose) -> dict:
    """One request to every endpoint, aimed at agent A's session, run, an operation A
    executes itself, and an artifact of A's run."""
    op = propose(
        "push-1",
        action="git.push",
        arguments={"remote": "origin", "branch": "main"},
        rollback_kind=Operation.RollbackKind.NONE,
    )
    artifact = attach_artifact(run=run, name="a.txt", content=b"A's notes", actor=AGENT)
    return calls(run.pk, op.pk, run.session_id, artifact.sha256)


# --- the API ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", CALLS)
def test_another_token_of_the_project_finds_nothing_of_agent_a(api, api_b, a_targets, name):
    method, path, body = a_targets[name]
    before = stored()

    response = send(api_b, method, path, body)

    assert problem(response, 404)["error"] == "not_found"
    assert stored() == before
    assert send(api, method, path, body).status_code != 404  # A itself reaches it.


@pytest.mark.parametrize("kind", ["operations", "requests"])
def test_another_token_cannot_wait_on_agent_a_s_rows(api, api_b, run, propose, kind):
    """A long-poll is refused before it waits: agent B neither holds a wait on A's
    operation or request nor learns when it changes."""
    if kind == "operations":
        pk = propose("call-1").pk
    else:
        pk = ask(run=run, prompt="Ship it?", actor=AGENT)[0].pk
    started = time.monotonic()

    response = api_b.get(f"/{kind}/{pk}", {"wait": 5})

    assert problem(response, 404)["error"] == "not_found"
    assert time.monotonic() - started < 2, "B waited on a row it cannot see"
    assert api.get(f"/{kind}/{pk}").status_code == 200  # A itself reaches it.


@pytest.mark.parametrize("leaves", ["membership removed", "account deactivated"])
def test_a_token_stops_working_when_its_owner_leaves_the_project(
    project, reviewer, token_b, api_b, leaves
):
    assert api_b.post("/sessions", {"title": "before"}).status_code == 201
    if leaves == "membership removed":
        Membership.objects.filter(project=project, user=reviewer).delete()
    else:
        reviewer.is_active = False
        reviewer.save()
    before = stored()

    response = api_b.post("/sessions", {"title": "after"})

    problem(response, 401)
    assert stored() == before


def test_a_token_cannot_retry_another_agents_run_in_its_own_session(api_b, run):
    finish_run(run=run, status=Run.Status.FAILED, actor=AGENT, outcome="Supplier API down")
    own = api_b.post("/sessions", {"title": "B's work"}).json()["id"]

    response = api_b.post("/runs", {"session": own, "goal": "Again", "retry_of": run.pk})

    problem(response, 404)
    assert not Run.objects.filter(retry_of=run).exists()


def test_a_session_and_its_proposals_belong_to_the_token_that_opened_it(api, api_b, token_b):
    opened = api_b.post("/sessions", {"title": "B's work"}).json()["id"]
    assert Session.objects.get(pk=opened).token == token_b
    problem(api.post("/runs", {"session": opened, "goal": "Sneak in"}), 404)

    started = api_b.post("/runs", {"session": opened, "goal": "B's goal"})
    proposed = api_b.propose(started.json()["id"])

    assert proposed.status_code == 201
    assert Operation.objects.get(pk=proposed.json()["id"]).proposed_by_token == token_b


# --- deciding ----------------------------------------------------------------------------


@pytest.fixture
def proposed_by_b(propose, token_b) -> Operation:
    """An operation token B proposed into agent A's run (what the API allowed before):
    the run is ``owner``'s, the proposal came from a token acting for ``reviewer``."""
    return propose("from-b", token=token_b)


def decide_page(client, op: Operation):
    return post_decision(client, op)


def test_a_reviewer_cannot_approve_what_their_token_proposed_into_any_run(
    client, reviewer, reviewer2, proposed_by_b
):
    client.force_login(reviewer)
    before = stored()

    response = decide_page(client, proposed_by_b)

    assert response.status_code == 400
    assert "you own the agent token that proposed this" in response.text
    assert stored() == before
    client.force_login(reviewer2)  # Someone else decides.
    assert decide_page(client, proposed_by_b).status_code == 302
    proposed_by_b.refresh_from_db()
    assert proposed_by_b.status == Operation.Status.APPROVED


def test_the_pages_tell_that_reviewer_why_and_offer_no_decision(client, reviewer, proposed_by_b):
    client.force_login(reviewer)
    reason = "You own the agent token that proposed this, so someone else must decide on it"

    page = client.get(f"/operations/{proposed_by_b.pk}/").text
    queue = client.get("/approvals/").text

    assert reason in page
    assert f'action="/operations/{proposed_by_b.pk}/decide/"' not in page
    assert reason in queue


# --- a token acts for a member of its project ---------------------------------------------


def tokens_page(project) -> str:
    return f"/projects/{project.slug}/tokens/"


def test_issuing_a_token_for_someone_outside_the_project_is_refused(project, outsider):
    with pytest.raises(ValidationError, match="outsider is not a member of Acme"):
        AgentToken.issue(project=project, name="spy", owner=outsider)
    assert not AgentToken.objects.exists()


def test_the_token_page_offers_only_the_projects_members(
    client, project, admin_user, reviewer, outsider
):
    client.force_login(admin_user)

    page = client.get(tokens_page(project)).text

    assert '<option value="reviewer">reviewer</option>' in page
    assert '<option value="admin">admin</option>' in page
    assert "outsider" not in page


def test_the_token_page_refuses_an_owner_from_another_project(
    client, admin_user, project, outsider
):
    client.force_login(admin_user)

    response = client.post(tokens_page(project), {"name": "spy", "owner": "outsider"})

    assert response.status_code == 400
    assert "outsider is not one of the available choices" in response.text
    assert not AgentToken.objects.exists()


def test_a_token_without_an_owner_acts_for_a_reading_stand_in(project, admin_user):
    call_command(
        "create_agent_token", project="acme", name="bot", issued_by="admin", stdout=StringIO()
    )

    stand_in = AgentToken.objects.get(name="bot").owner
    roles = Membership.objects.filter(user=stand_in).values_list("project__slug", "role__name")
    assert list(roles) == [("acme", Role.AUDITOR)]
    assert not stand_in.has_usable_password()


def test_a_person_with_the_stand_ins_name_is_never_taken_for_it(
    project, admin_user, django_user_model
):
    person = django_user_model.objects.create_user("agent-acme-bot", password="a-real-one")
    Membership.objects.create(project=project, user=person, role=role_group(Role.REVIEWER))

    with pytest.raises(CommandError, match="name one of the project's members"):
        call_command(
            "create_agent_token", project="acme", name="bot", issued_by="admin", stdout=StringIO()
        )

    assert not AgentToken.objects.filter(name="bot").exists()


def test_the_demo_agent_acts_for_a_member_also_when_the_demo_restarts(db, settings, tmp_path):
    settings.OVERSIGHT_ARTIFACT_ROOT = tmp_path
    call_command("seed_demo", stdout=StringIO())
    first = DemoCommand()._agent_token("demo-agent")
    Api(first).post("/sessions", {"title": "First start"})

    # The first token's session still points at it.
    second = DemoCommand()._agent_token("demo-agent")

    demo = Project.objects.get(slug="demo")
    token = AgentToken.authenticate(second)
    assert token.owner.memberships.filter(project=demo).exists()
    assert Api(first).post("/sessions", {"title": "Old token"}).status_code == 401
    assert Api(second).post("/sessions", {"title": "Second start"}).status_code == 201


def test_pages_name_the_agent_by_its_token_not_by_the_label_it_chose(client, api_b, reviewer2):
    """An agent's label is free text: it could claim to be another agent."""
    opened = api_b.post("/sessions", {"agent": "payroll-bot (verified by CFO)"}).json()["id"]
    run = api_b.post("/runs", {"session": opened, "goal": "Pay"}).json()
    client.force_login(reviewer2)

    for url in ("/runs/", f"/runs/{run['id']}/", f"/audit/runs/{run['id']}/"):
        page = client.get(url).text
        assert 'agent-b <span class="muted">(calls itself “payroll-bot (verified by CFO)”)' in page
