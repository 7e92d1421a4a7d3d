import pytest

from runs.services.runs import start_run
from tests.conftest import AGENT


@pytest.fixture
def many_runs(session):
    def make(count: int) -> None:
        for n in range(count):
            start_run(session=session, goal=f"Goal {n}", actor=AGENT)

    return make


def test_anonymous_is_sent_to_login(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/"


def test_login_page_is_public(client):
    assert client.get("/accounts/login/").status_code == 200


def test_wrong_method_is_refused(client, reviewer):
    client.force_login(reviewer)
    assert client.post("/").status_code == 405


def test_member_sees_own_project_runs_only(client, reviewer, run, outsider):
    client.force_login(reviewer)
    assert "Pay the supplier invoice" in client.get("/").text
    client.force_login(outsider)
    page = client.get("/").text
    assert "Pay the supplier invoice" not in page
    assert "Acme" not in page


def test_goal_with_markup_is_shown_as_text(client, reviewer, session):
    start_run(session=session, goal="<script>alert('x')</script>", actor=AGENT)
    client.force_login(reviewer)
    page = client.get("/").text
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert" in page


@pytest.mark.parametrize("count", [5, 50])
def test_query_count_does_not_grow_with_runs(
    client, reviewer, many_runs, count, django_assert_max_num_queries
):
    many_runs(count)
    client.force_login(reviewer)
    client.get("/")  # The first visit stores the time zone in the session.
    with django_assert_max_num_queries(8):
        assert client.get("/").status_code == 200
