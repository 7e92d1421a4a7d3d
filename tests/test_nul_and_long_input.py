"""Input PostgreSQL cannot hold is refused with a 4xx that says why, before any view
hands it to a query: a NUL character (U+0000) in an address or its query (an
artifact's address, the admin's list filters, a page's filters), and a user name longer
than any account's at sign-in. Each answered 500 on PostgreSQL (#35 item 6); SQLite
took them silently."""

import pytest

from tests.api_helpers import Api
from tests.conftest import make_user
from tests.helpers import sign_in


def test_a_nul_in_an_artifacts_address_is_refused_with_a_reason(agent_token):
    response = Api(agent_token.plain).get("/artifacts/%00")

    assert response.status_code == 400
    assert "NUL" in response.json()["detail"]


@pytest.mark.parametrize("path", ["/admin/runs/operation/?status=%00", "/admin/auth/user/?q=%00"])
def test_a_nul_in_the_admins_filters_is_refused(client, path, db):
    staff = make_user("root")
    staff.is_staff = staff.is_superuser = True
    staff.save()
    client.force_login(staff)

    response = client.get(path)

    assert response.status_code == 400
    assert "NUL" in response.content.decode()


@pytest.mark.parametrize("path", ["/runs/?status=%00", "/audit/?actor=%00", "/runs/%00/"])
def test_a_nul_in_a_pages_address_is_refused(client, reviewer, path):
    client.force_login(reviewer)

    response = client.get(path)

    assert response.status_code == 400
    assert "NUL" in response.content.decode()


def test_a_user_name_longer_than_any_account_is_a_form_error(client, db):
    response = sign_in(client, "x" * 300, "whatever")

    assert response.status_code == 200
    assert "at most 150 characters" in response.content.decode()
