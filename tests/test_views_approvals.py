import re
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from runs import queue
from runs.models import Operation, Role
from runs.permissions import role_group
from runs.queue import QUEUE_LIMIT
from runs.services.requests import ask
from runs.services.runs import open_session, start_run
from tests.conftest import AGENT, make_user
from tests.helpers import decide_on

HTMX = {"HX-Request": "true"}


def listed(page: str) -> list[int]:
    """The operations in the queue, in the order shown."""
    return [int(pk) for pk in re.findall(r'<tr id="op-(\d+)"', page)]


def nav_count(page: str) -> int:
    return int(re.search(r'id="nav-pending"[^>]*>(\d+)<', page)[1])


def version_of(fragment: str) -> str:
    return re.search(r"hx-vals='\{\"since\": \"([^\"]+)\"\}'", fragment)[1]


@pytest.fixture
def other_run(other_project, outsider):
    session = open_session(project=other_project, owner=outsider, agent="elsewhere-agent")
    return start_run(session=session, goal="Tidy the other warehouse", actor=AGENT)


def test_anonymous_is_sent_to_login(client):
    response = client.get("/approvals/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/approvals/"


def test_wrong_method_is_refused(client, reviewer):
    client.force_login(reviewer)
    assert client.post("/approvals/").status_code == 405


@pytest.mark.parametrize("role", ["auditor", "admin_user"])
def test_members_who_cannot_decide_are_refused(client, request, role):
    client.force_login(request.getfixturevalue(role))
    assert client.get("/approvals/").status_code == 403


def test_reviewer_sees_the_projects_proposals_oldest_first(client, reviewer, propose):
    first, second, third = propose("call-1"), propose("call-2"), propose("call-3")
    now = timezone.now()
    for op, minutes_ago in [(first, 3), (second, 1), (third, 2)]:
        Operation.objects.filter(pk=op.pk).update(created_at=now - timedelta(minutes=minutes_ago))
    client.force_login(reviewer)

    page = client.get("/approvals/").text

    assert listed(page) == [first.pk, third.pk, second.pk]
    for op in (first, second, third):
        assert f'href="/operations/{op.pk}/"' in page
    assert "Pay the supplier invoice" in page


def test_other_projects_proposals_are_not_listed(client, reviewer, outsider, propose, other_run):
    mine, theirs = propose("call-1"), propose("call-9", target=other_run)

    client.force_login(reviewer)
    assert listed(client.get("/approvals/").text) == [mine.pk]
    client.force_login(outsider)
    page = client.get("/approvals/").text
    assert listed(page) == [theirs.pk]
    assert "Pay the supplier invoice" not in page


@pytest.fixture
def reviewer_of_both(project, other_project):
    user = make_user("both", project, Role.REVIEWER)
    other_project.memberships.create(user=user, role=role_group(Role.REVIEWER))
    return user


@pytest.fixture
def varied_queue(propose, other_run) -> dict[str, Operation]:
    """Proposals of several actions and risks in two projects, by call id."""
    ops = [
        propose("transfer"),
        propose("deploy", action="deploy.service", arguments={"service": "api"}, risk="low"),
        propose("big-transfer", risk=Operation.Risk.HIGH),
        propose("elsewhere", target=other_run),
    ]
    return {op.call_id: op for op in ops}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", ["transfer", "deploy", "big-transfer", "elsewhere"]),
        ("project=other", ["elsewhere"]),
        ("action=deploy.service", ["deploy"]),
        ("risk=high", ["big-transfer"]),
        ("project=acme&action=ledger.transfer&risk=medium", ["transfer"]),
    ],
)
def test_filters_narrow_the_queue(client, reviewer_of_both, varied_queue, query, expected):
    client.force_login(reviewer_of_both)
    page = client.get(f"/approvals/?{query}").text
    assert listed(page) == [varied_queue[call_id].pk for call_id in expected]
    assert nav_count(page) == 4  # The navigation counts all that waits, filtered or not.


def test_title_and_navigation_show_how_many_wait(client, reviewer, propose):
    propose("call-1"), propose("call-2")
    client.force_login(reviewer)

    page = client.get("/approvals/").text

    assert "<title>(2) Approvals · Oversight</title>" in page
    assert nav_count(page) == 2
    assert "2 operations waiting for a decision" in page


def test_operation_waiting_longer_than_the_sla_is_marked_overdue(client, reviewer, propose):
    old, fresh = propose("call-1"), propose("call-2")
    late = timezone.now() - timedelta(minutes=settings.OVERSIGHT_REVIEW_SLA_MINUTES + 1)
    Operation.objects.filter(pk=old.pk).update(created_at=late)
    client.force_login(reviewer)

    page = client.get("/approvals/").text

    assert f'<tr id="op-{old.pk}" class="overdue">' in page
    assert f'<tr id="op-{fresh.pk}" class="">' in page
    assert page.count('<strong class="flag">overdue</strong>') == 1


def test_htmx_poll_gets_only_the_queue_with_the_navigation_count(client, reviewer, propose):
    propose("call-1")
    client.force_login(reviewer)

    fragment = client.get("/approvals/", headers=HTMX).text

    assert "<html" not in fragment
    assert fragment.lstrip().startswith("<title>(1) Approvals")
    assert '<section id="queue"' in fragment
    assert re.search(r'<span id="nav-pending"[^>]*hx-swap-oob="true"[^>]*>1</span>', fragment)


def test_htmx_poll_of_an_unchanged_queue_swaps_nothing(client, reviewer, propose):
    propose("call-1")
    client.force_login(reviewer)
    since = version_of(client.get("/approvals/", headers=HTMX).text)

    unchanged = client.get("/approvals/", {"since": since}, headers=HTMX)
    assert unchanged.status_code == 204
    assert unchanged.content == b""

    new = propose("call-2")
    changed = client.get("/approvals/", {"since": since}, headers=HTMX)
    assert changed.status_code == 200
    assert 'id="queue"' in changed.text
    assert f'id="op-{new.pk}"' in changed.text


@pytest.mark.parametrize("count", [5, 500])
def test_query_count_does_not_grow_with_the_queue(
    client, reviewer, propose, run, agent_token, count, django_assert_num_queries
):
    for n in range(count):
        propose(f"call-{n}")
    for n in range(count):
        ask(run=run, prompt=f"Question {n}?", actor=AGENT, token=agent_token)
    client.force_login(reviewer)
    client.get("/approvals/")  # The first visit stores the time zone in the session.
    # Session, user, the reviewer's projects (any? the filter's choices), for operations
    # and for requests the version's aggregate and the rows, the navigation's projects
    # and alerts (its count of what waits is the queue's own).
    with django_assert_num_queries(10):
        page = client.get("/approvals/").text
    shown = min(count, QUEUE_LIMIT)
    assert len(listed(page)) == shown
    assert len(re.findall(r'<tr id="request-(\d+)"', page)) == shown
    assert f"{count} operations waiting for a decision and {count} requests" in page
    assert ('id="queue-limit"' in page) == (count > QUEUE_LIMIT)


def test_a_long_queue_shows_its_oldest_and_says_so(client, reviewer, propose, monkeypatch):
    monkeypatch.setattr(queue, "QUEUE_LIMIT", 2)
    oldest, second, _ = (propose(f"call-{n}") for n in range(3))
    client.force_login(reviewer)

    page = client.get("/approvals/").text

    assert listed(page) == [oldest.pk, second.pk]
    assert "Showing the oldest 2 of each: the next ones come up as these are decided" in page
    assert 'data-total="3"' in page
    assert "3 operations waiting for a decision" in page


def test_the_rest_of_a_long_queue_is_a_page_away_with_its_filters_kept(
    client, reviewer, propose, project, monkeypatch
):
    monkeypatch.setattr(queue, "QUEUE_LIMIT", 2)
    ops = [propose(f"call-{n}").pk for n in range(5)]
    client.force_login(reviewer)
    filtered = f"project={project.slug}"

    first = client.get(f"/approvals/?{filtered}").text
    second = client.get(f"/approvals/?{filtered}&page=2").text
    last = client.get(f"/approvals/?{filtered}&page=3").text

    assert [listed(first), listed(second), listed(last)] == [ops[:2], ops[2:4], ops[4:]]
    assert "Showing 3 to 4, oldest first, of each" in second
    assert links(first) == {"next": f"?{filtered}&amp;page=2"}
    assert links(second) == {"prev": f"?{filtered}&amp;page=1", "next": f"?{filtered}&amp;page=3"}
    assert links(last) == {"prev": f"?{filtered}&amp;page=2"}
    assert 'data-total="5"' in last


def links(page: str) -> dict[str, str]:
    """The queue's links to the pages before and after it, by ``rel``."""
    found = re.findall(r'<a href="([^"]*)" rel="(prev|next)"', page)
    return {rel: href for href, rel in found}


def test_what_a_reviewer_approved_waits_apart_and_out_of_their_count(
    client, propose, reviewer, reviewer2
):
    """Under a two-person rule, an operation a reviewer approved waits for someone
    else: their queue lists it last, under its own heading, and does not count it as
    waiting for them, while the second reviewer's queue still does."""
    first, second, third = (propose(f"call-{n}") for n in range(3))
    Operation.objects.filter(pk__in=[first.pk, third.pk]).update(required_approvals=2)
    decide_on(first, reviewer)
    client.force_login(reviewer)
    page = client.get("/approvals/").text
    assert "2 operations waiting for a decision" in page
    assert "after them, 1 you approved, waiting for a second reviewer" in page
    assert re.search(r'<span id="nav-pending"[^>]*>2</span>', page)
    assert listed(page) == [second.pk, third.pk, first.pk]
    seconds = page[page.index('<tbody class="seconds">') :]
    assert f'<tr id="op-{first.pk}"' in seconds
    assert "You approved it as it stands: a second reviewer must approve too." in seconds
    assert "1 of 2" in seconds

    other_page = client.get("/runs/").text  # the navigation counts the same there
    assert re.search(r'<span id="nav-pending"[^>]*>2</span>', other_page)

    client.force_login(reviewer2)
    page = client.get("/approvals/").text
    assert "3 operations waiting for a decision" in page
    assert 'class="seconds"' not in page
