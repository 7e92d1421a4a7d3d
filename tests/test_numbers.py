"""A project's numbers, for its admins: the queue at the end of each day, the time to a
person's first decision (p50, p95), who decides, how often reviewers reject or edit, which
actions fail their verification or raise alerts, with what policies approved counted
apart; durations as people say them; drawn as SVG (escaped labels) with the numbers
beside, in a fixed number of queries."""

from datetime import timedelta

import pytest
from django.utils import timezone

from runs.models import Alert, ApprovalPolicy, Operation
from runs.numbers import numbers_of, plain_duration
from tests.conftest import make_user
from tests.helpers import decide_on

QUERIES = 12  # the page, whatever the project's size


def aged(op: Operation, hours: float) -> Operation:
    """``op`` as if proposed ``hours`` ago."""
    Operation.objects.filter(pk=op.pk).update(created_at=timezone.now() - timedelta(hours=hours))
    op.refresh_from_db()
    return op


def test_the_numbers_of_a_day_of_reviewing(project, propose, reviewer, reviewer2, run):
    waiting = aged(propose("call-1"), 5)  # still waiting, for 5 hours
    approved = aged(propose("call-2"), 1)
    edited = aged(propose("call-3"), 1)
    rejected = aged(propose("call-4"), 1)
    decide_on(approved, reviewer)
    decide_on(edited, reviewer2, "edit", arguments={"from": "A", "to": "B", "amount": 90})
    decide_on(rejected, reviewer, "reject", comment="no")
    Alert.objects.create(project=project, run=run, operation=rejected, summary="checked")

    numbers = numbers_of(project)
    today = numbers.days[-1]
    assert (len(numbers.days), today.waiting, today.decided) == (30, 1, 3)
    assert 5 * 3600 <= today.oldest_seconds < 5.1 * 3600
    assert 59 * 60 <= today.p50_seconds <= 61 * 60 and 59 * 60 <= today.p95_seconds <= 61 * 60
    assert numbers.deciders == [("reviewer", 2), ("reviewer2", 1)]
    assert (numbers.decisions, numbers.rejected_percent, numbers.edited_percent) == (3, 33, 33)
    assert numbers.actions == [("ledger.transfer", 4, 0, 1)]
    assert waiting.status == "proposed"
    assert numbers.by_policy == 0


def test_what_a_policy_approves_is_counted_apart_from_people_s_decisions(
    project, propose, reviewer
):
    """An auto-approval takes no time and no one: counted in the time to decision it
    made the median a fraction of a millisecond, and the policy led "who decides"."""
    decide_on(aged(propose("call-1"), 1), reviewer)
    ApprovalPolicy.objects.create(
        project=project, action="ledger.transfer", approvals_required=ApprovalPolicy.Approvals.AUTO
    )
    for n in range(3):
        assert propose(f"auto-{n}").status == "approved"

    numbers = numbers_of(project)
    today = numbers.days[-1]
    assert today.decided == 1 and 59 * 60 <= today.p50_seconds <= 61 * 60
    assert numbers.deciders == [("reviewer", 1)]
    assert (numbers.decisions, numbers.by_policy) == (1, 3)


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (None, "—"),
        (0, "under 1 s"),
        (0.000081 * 60, "under 1 s"),
        (1, "1 s"),
        (59.9, "59 s"),
        (60, "1 min"),
        (250, "4 min 10 s"),
        (3600, "1 h"),
        (2 * 3600 + 5 * 60 + 59, "2 h 5 min"),
        (26 * 3600 + 30, "1 d 2 h"),
    ],
)
def test_a_duration_reads_as_people_say_it(seconds, shown):
    assert plain_duration(seconds) == shown


def test_yesterday_s_queue_is_as_it_was_at_its_end(project, propose, reviewer):
    op = aged(propose("call-1"), 30)
    decide_on(op, reviewer)  # decided today: at the end of yesterday it still waited
    numbers = numbers_of(project)
    assert (numbers.days[-2].waiting, numbers.days[-1].waiting) == (1, 0)


def test_an_admin_reads_the_page_in_a_fixed_number_of_queries(
    client, admin_user, project, propose, reviewer, django_assert_num_queries
):
    for n in range(6):
        decide_on(propose(f"call-{n}"), reviewer)
    client.force_login(admin_user)
    client.get("/")  # the first visit stores the time zone
    with django_assert_num_queries(QUERIES):
        page = client.get(f"/projects/{project.slug}/numbers/").text
    assert f"{project.name} in numbers" in page
    assert page.count("<svg") == 5
    assert "e-0" not in page and "under 1 s" in page  # never "8.1e-05 min"
    assert "<script" not in page.split("</head>")[1]


@pytest.mark.parametrize(("who", "status"), [("reviewer", 403), ("outsider", 404)])
def test_only_the_project_s_admins_read_its_numbers(client, project, who, status, request):
    client.force_login(request.getfixturevalue(who))
    assert client.get(f"/projects/{project.slug}/numbers/").status_code == status


def test_a_label_is_escaped_in_the_chart(client, admin_user, project, propose, run):
    decide_on(propose(), make_user('<script>alert("x")</script>', project, "reviewer"))
    client.force_login(admin_user)
    page = client.get(f"/projects/{project.slug}/numbers/").text
    assert "<script>alert" not in page
    assert "<title>&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;: 1</title>" in page
