"""Whoever issues an agent token may not decide on what its agent proposes or asks (#35
item 1). A member with the admin and reviewer roles used to mint a token, drive its
agent and approve its work: nothing recorded the issuer, and a token that "acts for"
another member barred that member instead. The issuer is recorded on every token, four
eyes counts them, the pages and the evidence name them, and a token acts for another
member only once that member accepts it."""

import pytest
from django.contrib import admin
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from runs import queue as waiting
from runs.engine.notifications import notify_reviewers
from runs.models import AgentToken, HumanRequest, Operation, Role
from tests.api_helpers import Api, agent_proposal, problem
from tests.conftest import make_user
from tests.helpers import post_decision, stored
from tests.test_migration_isolation import migrate
from tests.test_notifications import asked, inbox, listed
from tests.test_views_tokens import created_token, tokens_url

BARRED = "You issued the agent token that {did} this, so someone else must decide on it"


@pytest.fixture
def boss(project):
    """A member who both manages the project and reviews in it: the one who could mint
    a token and approve its agent's work."""
    return make_user("boss", project, Role.REVIEWER, Role.ADMIN)


def mint(client, issuer, project, name: str = "side-agent", owner: str = "") -> str:
    """A token minted on the tokens page by ``issuer``: its plain text."""
    client.force_login(issuer)
    response = client.post(tokens_url(project), {"name": name, "owner": owner})
    assert response.status_code == 200, response.text
    return created_token(response)


def drive(plain: str) -> tuple[Operation, HumanRequest]:
    """The token's agent at work: a run with a proposal and a question."""
    agent = Api(plain)
    session = agent.post("/sessions", {"title": "Side work"}).json()["id"]
    run = agent.post("/runs", {"session": session, "goal": "Push the release"}).json()["id"]
    operation = agent.propose(run, agent_proposal("push-1")).json()["id"]
    asked = agent.post(f"/runs/{run}/requests", {"prompt": "Ship it?", "external_id": "q-1"})
    return Operation.objects.get(pk=operation), HumanRequest.objects.get(pk=asked.json()["id"])


def approve(client, operation: Operation):
    """Approve on the operation's page (the agent's push cannot be undone: confirmed)."""
    return post_decision(client, operation, confirm=operation.action)


def answer_page(client, human: HumanRequest):
    human.refresh_from_db()
    data = {"kind": "approve", "version": human.version}
    return client.post(f"/requests/{human.pk}/answer/", data)


# --- four eyes counts the issuer ------------------------------------------------------


def test_every_token_records_its_issuer(client, boss, reviewer2, project):
    mint(client, boss, project, "stand-in-agent")
    mint(client, boss, project, "for-reviewer2", owner="reviewer2")

    issuers = AgentToken.objects.values_list("name", "issued_by__username")
    assert dict(issuers) == {"stand-in-agent": "boss", "for-reviewer2": "boss"}


def test_the_issuer_cannot_approve_what_its_agent_proposes(client, boss, reviewer, project):
    operation, _ = drive(mint(client, boss, project))
    before = stored()

    response = approve(client, operation)

    assert response.status_code == 400
    assert BARRED.format(did="proposed").lower() in response.text.lower()
    assert stored() == before
    client.force_login(reviewer)  # Someone else decides.
    assert approve(client, operation).status_code == 302
    operation.refresh_from_db()
    assert operation.status == Operation.Status.APPROVED


def test_the_issuer_cannot_answer_what_its_agent_asks(client, boss, reviewer, project):
    _, human = drive(mint(client, boss, project))
    before = stored()

    response = answer_page(client, human)

    assert response.status_code == 400
    assert BARRED.format(did="asked") in response.text
    assert stored() == before
    client.force_login(reviewer)
    assert answer_page(client, human).status_code == 302
    human.refresh_from_db()
    assert (human.status, human.answered_by) == (HumanRequest.Status.ANSWERED, reviewer)


def test_the_pages_tell_the_issuer_why_and_offer_no_decision(client, boss, project):
    operation, human = drive(mint(client, boss, project))

    page = client.get(f"/operations/{operation.pk}/").text
    asked = client.get(f"/requests/{human.pk}/").text
    queue = client.get("/approvals/").text

    assert f"{BARRED.format(did='proposed')} (four eyes)." in page
    assert f'action="/operations/{operation.pk}/decide/"' not in page
    assert f"{BARRED.format(did='asked')} (four eyes)." in asked
    assert ">Sign off</button>" not in asked
    assert BARRED.format(did="proposed") in queue


def test_the_issuer_is_not_emailed_about_its_agent_s_work(client, boss, reviewer, project):
    """Their email would lead them to pages that refuse them."""
    operation, human = drive(mint(client, boss, project))

    notify_reviewers()

    assert inbox(boss) == []
    (email,) = inbox(reviewer)
    assert (listed(email), asked(email)) == ([operation.pk], [human.pk])


def test_next_in_the_queue_skips_what_the_issuers_agent_proposed(client, boss, project, propose):
    theirs, _ = drive(mint(client, boss, project))
    other = propose("someone-elses")

    assert waiting.next_waiting(boss, other) is None
    assert waiting.next_waiting(boss, theirs) == other


# --- a token acts for another member only once they accept it ---------------------------


def test_a_token_for_another_member_waits_for_their_acceptance(client, boss, reviewer2, project):
    client.force_login(boss)
    made = client.post(tokens_url(project), {"name": "side-agent", "owner": "reviewer2"})
    plain = created_token(made)

    response = Api(plain).post("/sessions", {"title": "In reviewer2's name"})

    assert problem(response, 401)["error"] == "unauthenticated"
    assert AgentToken.authenticate(plain) is None
    assert AgentToken.objects.get(name="side-agent").waits
    assert "It acts once reviewer2 accepts it on their account page" in made.text
    assert "Waits for reviewer2" in client.get(tokens_url(project)).text


def test_a_waiting_token_is_told_whose_acceptance_it_waits_for(client, boss, reviewer2, project):
    plain = mint(client, boss, project, owner="reviewer2")

    body = problem(Api(plain).get("/actions"), 401)

    assert body["detail"] == (
        "this agent token waits for reviewer2's acceptance: it acts once they accept it on "
        "their account page"
    )
    # Any other refusal says nothing about the token.
    wrong = f"{plain.rsplit('_', 1)[0]}_not-the-secret"
    assert problem(Api(wrong).get("/actions"), 401)["detail"] == "a valid agent token is required"


def test_a_stand_in_or_the_issuer_s_own_token_acts_at_once(client, boss, project):
    stand_in = mint(client, boss, project, "stand-in-agent")
    own = mint(client, boss, project, "own-agent", owner="boss")

    for plain in (stand_in, own):
        assert Api(plain).post("/sessions", {"title": "Now"}).status_code == 201


def test_the_member_accepts_on_their_account_page(client, boss, reviewer2, reviewer, project):
    plain = mint(client, boss, project, owner="reviewer2")
    token = AgentToken.objects.get(name="side-agent")
    client.force_login(reviewer2)

    account = client.get("/account/").text
    page = client.get(f"/account/tokens/{token.pk}/").text
    accepted = client.post(f"/account/tokens/{token.pk}/", {"answer": "accept"}, follow=True)

    link = f'<a href="/account/tokens/{token.pk}/">side-agent</a>'
    assert f"{link} in Acme, issued by boss" in account
    assert "In Acme, issued by boss on" in page and ">Accept</button>" in page
    assert "neither you nor boss may decide on what its agent proposes" in accepted.text
    assert "side-agent" not in client.get("/account/").text  # no longer waits
    operation, _ = drive(plain)
    operation.run.refresh_from_db()
    assert operation.run.session.owner == reviewer2
    for barred in (reviewer2, boss):
        client.force_login(barred)
        assert approve(client, operation).status_code == 400
    client.force_login(reviewer)
    assert approve(client, operation).status_code == 302


def test_the_member_declines_and_the_token_never_acts(client, boss, reviewer2, project):
    plain = mint(client, boss, project, owner="reviewer2")
    token = AgentToken.objects.get(name="side-agent")
    client.force_login(reviewer2)

    response = client.post(f"/account/tokens/{token.pk}/", {"answer": "decline"}, follow=True)

    assert "Token side-agent is declined: its agent gets 401." in response.text
    token.refresh_from_db()
    assert token.revoked_at is not None and token.accepted_at is None
    assert Api(plain).post("/sessions", {"title": "Anyway"}).status_code == 401
    again = client.post(f"/account/tokens/{token.pk}/", {"answer": "accept"})
    assert again.status_code == 409
    assert "This token no longer waits for your answer." in again.text
    assert Api(plain).post("/sessions", {"title": "Anyway"}).status_code == 401


@pytest.mark.parametrize("who", ["boss", "reviewer", "outsider"])
def test_only_the_member_it_would_act_for_may_answer(
    request, client, boss, reviewer2, project, who
):
    mint(client, boss, project, owner="reviewer2")
    token = AgentToken.objects.get(name="side-agent")
    client.force_login(request.getfixturevalue(who))

    assert client.get(f"/account/tokens/{token.pk}/").status_code == 404
    assert client.post(f"/account/tokens/{token.pk}/", {"answer": "accept"}).status_code == 404
    token.refresh_from_db()
    assert token.waits


def test_an_answer_needs_a_post_naming_it(client, boss, reviewer2, project):
    mint(client, boss, project, owner="reviewer2")
    token = AgentToken.objects.get(name="side-agent")
    client.force_login(reviewer2)

    assert client.put(f"/account/tokens/{token.pk}/").status_code == 405
    refused = client.post(f"/account/tokens/{token.pk}/", {"answer": "maybe"})
    assert refused.status_code == 400 and "Choose Accept or Decline." in refused.text
    token.refresh_from_db()
    assert token.waits


def test_another_token_s_stand_in_cannot_be_made_to_accept(client, boss, project):
    mint(client, boss, project, "first")

    response = client.post(tokens_url(project), {"name": "second", "owner": "agent-acme-first"})

    assert response.status_code == 400
    assert "agent-acme-first never signs in, so could never accept" in response.text
    assert not AgentToken.objects.filter(name="second").exists()


def test_the_admin_cannot_add_a_token_without_its_issuer():
    """Tokens are issued on the tokens page and by the command, which record their
    issuer; the admin has no page for them."""
    assert not admin.site.is_registered(AgentToken)


# --- shown: the pages and the evidence ------------------------------------------------


def test_the_operation_and_request_pages_name_the_issuer(client, boss, reviewer, project):
    operation, human = drive(mint(client, boss, project))
    client.force_login(reviewer)

    for url in (f"/operations/{operation.pk}/", f"/requests/{human.pk}/"):
        assert "· its token issued by boss ·" in client.get(url).text, url


def test_a_token_issued_before_issuers_were_recorded_says_so(
    client, reviewer, agent_token, propose
):
    operation = propose("old")
    AgentToken.objects.filter(pk=agent_token.pk).update(issued_by=None)
    client.force_login(reviewer)

    page = client.get(f"/operations/{operation.pk}/").text

    assert 'its token issued by <span class="muted">not recorded</span>' in page


@pytest.mark.django_db(transaction=True)
def test_tokens_issued_before_the_migration_keep_acting():
    apps = migrate([("runs", "0027_operation_target")])
    try:
        user = apps.get_model("auth", "User").objects.create(username="owner")
        project = apps.get_model("runs", "Project").objects.create(slug="p", name="P")
        group = apps.get_model("auth", "Group").objects.get_or_create(name=Role.AUDITOR)[0]
        apps.get_model("runs", "Membership").objects.create(project=project, user=user, role=group)
        old = apps.get_model("runs", "AgentToken").objects.create(
            project=project, name="old", owner=user, prefix="0123456789", secret_hash="x"
        )
        migrate([("runs", "0028_token_issuer")])
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    token = AgentToken.objects.get(pk=old.pk)
    assert token.issued_by is None
    assert token.accepted_at == token.created_at
    assert AgentToken.acting().filter(pk=token.pk).exists()
