"""A project's numbers, for its admins: the queue at the end of each day, the time to a
first decision (p50, p95), who decides, how often reviewers reject or edit, which
actions fail their verification or raise alerts; drawn as SVG (escaped labels) with the
numbers beside, in a fixed number of queries."""

from datetime import timedelta

import pytest
from django.utils import timezone

from runs.models import Alert, Decision, Operation
from runs.numbers import numbers_of
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
    assert 5 <= today.oldest_hours < 5.1
    assert 59 <= today.p50_minutes <= 61 and 59 <= today.p95_minutes <= 61
    assert numbers.deciders == [("reviewer", 2), ("reviewer2", 1)]
    assert (numbers.decisions, numbers.rejected_percent, numbers.edited_percent) == (3, 33, 33)
    assert numbers.actions == [("ledger.transfer", 4, 0, 1)]
    assert waiting.status == "proposed"


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
    assert "<script" not in page.split("</head>")[1]


@pytest.mark.parametrize(("who", "status"), [("reviewer", 403), ("outsider", 404)])
def test_only_the_project_s_admins_read_its_numbers(client, project, who, status, request):
    client.force_login(request.getfixturevalue(who))
    assert client.get(f"/projects/{project.slug}/numbers/").status_code == status


def test_a_label_is_escaped_in_the_chart(client, admin_user, project, propose, run):
    Decision.objects.create(
        operation=propose(),
        policy='<script>alert("x")</script>',
        kind="approve",
        arguments_hash="0" * 64,
    )
    client.force_login(admin_user)
    page = client.get(f"/projects/{project.slug}/numbers/").text
    assert "<script>alert" not in page
    assert "policy:&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
