"""Admins manage agent tokens in the pages: create (shown once), list, revoke."""

import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from runs.models import AgentToken


def tokens_url(project) -> str:
    return f"/projects/{project.slug}/tokens/"


def api_status(client, plain: str) -> int:
    return client.get(
        "/api/v1/runs/999999", headers={"Authorization": f"Bearer {plain}"}
    ).status_code


def created_token(response) -> str:
    return re.search(r'id="new-token" class="code" value="(ovs_[^"]+)"', response.text).group(1)


def test_admin_creates_a_token_shown_once_that_the_api_accepts(client, admin_user, project):
    client.force_login(admin_user)
    response = client.post(tokens_url(project), {"name": "planner", "owner": ""})

    assert response.status_code == 200
    plain = created_token(response)
    token = AgentToken.objects.get(project=project, name="planner")
    assert plain.split("_")[1] == token.prefix and plain not in token.secret_hash
    assert api_status(client, plain) == 404  # authenticated; the run does not exist
    assert plain not in client.get(tokens_url(project)).text  # never shown again


def test_the_page_names_each_token_s_issuer(client, admin_user, project, agent_token):
    AgentToken.objects.filter(pk=agent_token.pk).update(issued_by=None)  # before issuers
    client.force_login(admin_user)
    client.post(tokens_url(project), {"name": "planner"})

    page = client.get(tokens_url(project)).text

    rows = re.findall(r"<tr>\s*<td>(\S+) .*?</td>\s*<td>[^<]*</td>\s*<td>(.*?)</td>", page, re.S)
    assert rows == [("planner", "admin"), ("test-agent", '<span class="muted">not recorded</span>')]


def test_a_token_waiting_for_the_admin_links_to_their_answer(client, admin_user, owner, project):
    waiting, _ = AgentToken.issue(project=project, name="mine", owner=admin_user, issued_by=owner)
    AgentToken.issue(project=project, name="theirs", owner=owner, issued_by=admin_user)
    client.force_login(admin_user)

    page = client.get(tokens_url(project)).text

    assert "Waits for admin</span>" in page and "Waits for owner</span>" in page
    assert re.findall(r'href="/account/tokens/(\d+)/"', page) == [str(waiting.pk)]


def test_revoked_token_gets_401(client, admin_user, project):
    client.force_login(admin_user)
    plain = created_token(client.post(tokens_url(project), {"name": "planner"}))
    token = AgentToken.objects.get(name="planner")

    response = client.post(f"{tokens_url(project)}{token.pk}/revoke/")

    assert response.status_code == 302
    assert api_status(client, plain) == 401
    assert "Revoked" in client.get(tokens_url(project)).text


def missing_descriptions(page: str) -> set[str]:
    """The ids that an aria-describedby names and the page does not have."""
    named = {i for ids in re.findall(r'aria-describedby="([^"]*)"', page) for i in ids.split()}
    return named - set(re.findall(r' id="([^"]+)"', page))


def test_the_form_s_descriptions_are_on_the_page_with_or_without_errors(
    client, admin_user, project
):
    client.force_login(admin_user)
    client.post(tokens_url(project), {"name": "planner"})
    blank = client.get(tokens_url(project)).text
    refused = client.post(tokens_url(project), {"name": "planner", "owner": "nobody"}).text
    assert 'aria-describedby="id_name_helptext"' in blank
    assert 'aria-describedby="id_owner_helptext id_owner_error"' in refused
    assert missing_descriptions(blank) == missing_descriptions(refused) == set()


def test_duplicate_name_and_unknown_owner_are_form_errors(client, admin_user, project):
    client.force_login(admin_user)
    client.post(tokens_url(project), {"name": "planner"})

    duplicate = client.post(tokens_url(project), {"name": "planner"})
    unknown = client.post(tokens_url(project), {"name": "other", "owner": "nobody"})

    assert duplicate.status_code == unknown.status_code == 400
    assert "already has a token named" in duplicate.text
    assert "nobody is not one of the available choices" in unknown.text
    assert AgentToken.objects.count() == 1


@pytest.mark.parametrize(
    ("who", "status"), [("reviewer", 403), ("auditor", 403), ("outsider", 404)]
)
def test_only_the_projects_admins_manage_tokens(request, client, project, who, status):
    client.force_login(request.getfixturevalue(who))
    assert client.get(tokens_url(project)).status_code == status
    assert client.post(tokens_url(project), {"name": "x"}).status_code == status
    assert not AgentToken.objects.exists()


def test_revoke_needs_post(client, admin_user, project):
    client.force_login(admin_user)
    client.post(tokens_url(project), {"name": "planner"})
    token = AgentToken.objects.get(name="planner")
    assert client.get(f"{tokens_url(project)}{token.pk}/revoke/").status_code == 405


def test_command_prints_a_working_token_and_refuses_unknown_projects(client, project, owner):
    out = StringIO()
    mine = {"issued_by": "owner", "owner": "owner"}
    call_command("create_agent_token", project="acme", name="cli", **mine, stdout=out)
    assert api_status(client, out.getvalue().strip()) == 404
    assert AgentToken.objects.get(name="cli").owner == owner
    with pytest.raises(CommandError, match="no project 'nope'"):
        call_command("create_agent_token", project="nope", name="cli", issued_by="owner")
