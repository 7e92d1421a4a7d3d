import html
import re
from datetime import UTC, datetime

import pytest
from django.test import Client

from runs.models import Operation, Role, Run
from runs.payloads import MessageKind
from runs.permissions import role_group
from runs.services.artifacts import attach_artifact
from runs.services.runs import (
    AWAITING_DECISION,
    append_message,
    finish_run,
    open_session,
    request_input,
    start_run,
)
from runs.views import runs as runs_views
from tests.conftest import AGENT, make_user
from tests.helpers import decide_on, stored

QUERIES = 14  # the run page, however many operations, checkpoints and messages
RUN_LIST_QUERIES = 8  # the list of runs, however many there are

REASON = "supplier under investigation"


def shown(page: str, goals) -> set[str]:
    return {goal for goal in goals if f"<td>{goal}</td>" in page}


@pytest.fixture
def member_of_both(project, other_project):
    user = make_user("both", project, Role.AUDITOR)
    other_project.memberships.create(user=user, role=role_group(Role.AUDITOR))
    return user


@pytest.fixture
def varied_runs(session, other_project, outsider, propose) -> dict[str, Run]:
    """Runs in every state the filters tell apart, by goal."""
    helper = open_session(project=session.project, owner=session.owner, agent="helper-bot")
    elsewhere = open_session(project=other_project, owner=outsider, agent="test-agent")
    runs = {
        goal: start_run(session=on, goal=goal, actor=AGENT)
        for goal, on in [
            ("Pay Alpha", session),
            ("Ask Bravo", session),
            ("Close Charlie", session),
            ("Help Delta", helper),
            ("Visit Echo", elsewhere),
        ]
    }
    propose("call-1", target=runs["Pay Alpha"])
    request_input(run=runs["Ask Bravo"], question="Which invoice?", actor=AGENT)
    finish_run(run=runs["Close Charlie"], status=Run.Status.COMPLETED, actor=AGENT)
    Run.objects.filter(pk=runs["Close Charlie"].pk).update(
        created_at=datetime(2024, 1, 10, tzinfo=UTC)
    )
    return runs


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", {"Pay Alpha", "Ask Bravo", "Close Charlie", "Help Delta", "Visit Echo"}),
        ("status=waiting", {"Pay Alpha", "Ask Bravo"}),
        ("status=completed", {"Close Charlie"}),
        ("reason=needs_input", {"Ask Bravo"}),
        ("reason=approval", {"Pay Alpha"}),
        ("project=other", {"Visit Echo"}),
        ("agent=helper-bot", {"Help Delta"}),
        ("until=2024-01-31", {"Close Charlie"}),
        ("since=2024-02-01", {"Pay Alpha", "Ask Bravo", "Help Delta", "Visit Echo"}),
        ("since=2024-01-01&until=2024-01-10", {"Close Charlie"}),
    ],
)
def test_run_list_filters(client, member_of_both, varied_runs, query, expected):
    client.force_login(member_of_both)
    page = client.get(f"/runs/?{query}").text
    assert shown(page, varied_runs) == expected


def test_run_list_shows_only_the_users_projects(client, reviewer, varied_runs):
    client.force_login(reviewer)
    assert "Visit Echo" not in shown(client.get("/runs/").text, varied_runs)


@pytest.mark.parametrize("count", [5, 60])
def test_run_list_query_count_does_not_grow_with_runs(
    client, reviewer, session, propose, count, django_assert_num_queries
):
    for n in range(count):
        propose("call-1", target=start_run(session=session, goal=f"Goal {n}", actor=AGENT))
    client.force_login(reviewer)
    client.get("/runs/")  # The first visit stores the time zone in the session.
    with django_assert_num_queries(RUN_LIST_QUERIES):
        assert client.get("/runs/").status_code == 200


def test_run_list_pages_go_from_the_newest_with_each_runs_own_count(
    client, reviewer, session, propose
):
    runs = [start_run(session=session, goal=f"Goal {n}", actor=AGENT) for n in range(53)]
    for n, run in enumerate(runs[:4]):
        for call in range(n):
            propose(f"call-{call}", target=run)
    client.force_login(reviewer)

    def rows(page: int) -> list[tuple[str, str]]:
        text = client.get(f"/runs/?page={page}").text
        return re.findall(r"<td>(Goal \d+)</td>\s*<td>.*?</td>\s*<td>(\d+)</td>", text, re.S)

    first, second = rows(1), rows(2)
    assert [goal for goal, _ in first] == [f"Goal {n}" for n in range(52, 2, -1)]
    assert second == [("Goal 2", "2"), ("Goal 1", "1"), ("Goal 0", "0")]


# --- The run page ---------------------------------------------------------------------


@pytest.fixture
def as_reviewer(client, reviewer) -> Client:
    client.force_login(reviewer)
    return client


def test_run_page_shows_status_wait_and_goal(as_reviewer, run, propose):
    op = propose("call-1")

    page = as_reviewer.get(f"/runs/{run.pk}/").text

    assert '<span class="status status-waiting">Waiting</span>' in page
    assert (
        f"Waiting for <strong>Approval</strong>. Unblocked by: {html.escape(AWAITING_DECISION)}"
        in page
    )
    assert '<p class="goal">Pay the supplier invoice</p>' in page
    assert f'<a href="/operations/{op.pk}/">Operation {op.pk}</a>' in page


def test_run_page_timeline_tells_the_story_in_order(as_reviewer, run, propose):
    append_message(
        run=run, kind=MessageKind.AGENT, payload={"text": "Looking up the invoice"}, actor=AGENT
    )
    propose("call-1")

    page = as_reviewer.get(f"/runs/{run.pk}/").text
    timeline = page[page.index('<ol class="timeline">') :]

    story = [
        "<code>run.created</code>",
        "Looking up the invoice",
        "<code>ledger.transfer</code></a> (Medium risk)",
        "<code>operation.proposed</code>",
    ]
    positions = [timeline.index(entry) for entry in story]
    assert positions == sorted(positions)


def test_artifact_is_listed_and_downloads_as_an_attachment(as_reviewer, run):
    attach_artifact(run=run, name="reports/summary.txt", content=b"total: 100\n", actor=AGENT)

    page = as_reviewer.get(f"/runs/{run.pk}/").text
    link = re.search(r'<a href="(/runs/\d+/artifacts/\d+/)">reports/summary.txt</a>', page)
    assert "11 bytes" in page

    response = as_reviewer.get(link[1])
    assert response.status_code == 200
    assert response["Content-Disposition"] == 'attachment; filename="summary.txt"'
    assert response["Content-Type"] == "text/plain"
    assert b"".join(response.streaming_content) == b"total: 100\n"
    response.close()


def test_artifact_of_another_run_is_not_found(as_reviewer, run, session):
    attach_artifact(run=run, name="summary.txt", content=b"x", actor=AGENT)
    ref = run.checkpoints.get(event="artifact.attached").artifact_refs.get()
    second = start_run(session=session, goal="Another goal", actor=AGENT)
    assert as_reviewer.get(f"/runs/{second.pk}/artifacts/{ref.pk}/").status_code == 404


def test_other_projects_run_and_artifacts_are_not_found(client, outsider, run):
    attach_artifact(run=run, name="summary.txt", content=b"x", actor=AGENT)
    ref = run.checkpoints.get(event="artifact.attached").artifact_refs.get()
    client.force_login(outsider)
    assert client.get(f"/runs/{run.pk}/").status_code == 404
    assert client.get(f"/runs/{run.pk}/artifacts/{ref.pk}/").status_code == 404


# --- Cancelling -----------------------------------------------------------------------


def cancel_url(run: Run) -> str:
    return f"/runs/{run.pk}/cancel/"


def test_admin_is_asked_to_confirm_with_a_reason(client, admin_user, run):
    client.force_login(admin_user)
    assert f'href="{cancel_url(run)}"' in client.get(f"/runs/{run.pk}/").text

    page = client.get(cancel_url(run)).text

    assert f"Cancel run {run.pk}?" in page
    assert '<textarea name="reason"' in page


def test_reviewer_is_not_offered_the_cancel_link(as_reviewer, run):
    assert cancel_url(run) not in as_reviewer.get(f"/runs/{run.pk}/").text


@pytest.mark.parametrize("method", ["get", "post"])
@pytest.mark.parametrize(("role", "status"), [("reviewer", 403), ("outsider", 404)])
def test_cancel_without_the_role_is_refused(client, request, run, method, role, status):
    client.force_login(request.getfixturevalue(role))
    before = stored()
    assert getattr(client, method)(cancel_url(run), {"reason": REASON}).status_code == status
    assert stored() == before


def test_cancel_wrong_method_is_refused(client, admin_user, run):
    client.force_login(admin_user)
    assert client.put(cancel_url(run)).status_code == 405


def test_cancel_without_a_reason_is_refused_and_changes_nothing(client, admin_user, run, propose):
    propose("call-1")
    client.force_login(admin_user)
    before = stored()

    response = client.post(cancel_url(run), {"reason": ""})

    assert response.status_code == 400
    assert 'id="id_reason_error" role="alert">This field is required.</p>' in response.text
    assert 'aria-describedby="id_reason_error"' in response.text
    assert stored() == before


def test_cancel_stops_the_run_and_its_pending_operation(client, admin_user, run, propose):
    op = propose("call-1")
    client.force_login(admin_user)

    response = client.post(cancel_url(run), {"reason": REASON})

    assert response.status_code == 302
    assert response["Location"] == f"/runs/{run.pk}/"
    run.refresh_from_db()
    op.refresh_from_db()
    assert (run.status, run.outcome) == (Run.Status.CANCELLED, REASON)
    assert op.status == Operation.Status.CANCELLED
    page = client.get(response["Location"]).text
    assert '<span class="status status-cancelled">Cancelled</span>' in page
    assert "The run is cancelled; nothing more will fire." in page
    assert cancel_url(run) not in page


def test_cancelling_a_finished_run_is_refused_with_the_reason(client, admin_user, run):
    finish_run(run=run, status=Run.Status.COMPLETED, actor=AGENT)
    client.force_login(admin_user)
    before = stored()

    response = client.post(cancel_url(run), {"reason": REASON})

    assert response.status_code == 400
    assert f"run {run.pk} already ended completed" in response.text
    assert stored() == before
    run.refresh_from_db()
    assert not run.cancel_requested


def test_cancel_needs_the_csrf_token(admin_user, run):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)

    assert client.post(cancel_url(run), {"reason": REASON}).status_code == 403
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING


def test_run_page_groups_each_operation_s_steps_under_it(as_reviewer, run, propose, reviewer2):
    first, second = propose("call-1"), propose("call-2")
    decide_on(first, reviewer2, "reject", comment="Not this one")
    page = as_reviewer.get(f"/runs/{run.pk}/").text
    steps = re.findall(
        r'<ol class="steps" aria-label="Operation (\d+), step by step">(.*?)</ol>', page, re.S
    )
    by_operation = {
        int(pk): re.findall(r"<code>([a-z_.]+)</code> (\S+) → (\w+)", body) for pk, body in steps
    }
    assert by_operation == {
        first.pk: [
            ("operation.proposed", "—", "proposed"),
            ("operation.status", "proposed", "rejected"),
        ],
        second.pk: [("operation.proposed", "—", "proposed")],
    }
    # The run's own checkpoints stay in the timeline itself.
    timeline = page[page.index('<ol class="timeline">') :]
    assert timeline.index("<code>run.created</code>") < timeline.index('<ol class="steps"')


@pytest.mark.parametrize("count", [1, 12])
def test_run_page_takes_a_fixed_number_of_queries(
    as_reviewer, run, propose, reviewer2, count, django_assert_num_queries
):
    for n in range(count):
        decide_on(propose(f"call-{n}"), reviewer2, "reject", comment="no")
        append_message(run=run, kind=MessageKind.AGENT, payload={"text": f"{n}"}, actor=AGENT)
        attach_artifact(run=run, name=f"notes-{n}.txt", content=b"x", actor=AGENT)
    as_reviewer.get(f"/runs/{run.pk}/")  # the first visit stores the time zone
    with django_assert_num_queries(QUERIES):
        assert as_reviewer.get(f"/runs/{run.pk}/").status_code == 200


def test_a_long_runs_tables_show_their_latest_rows_and_point_to_the_rest(
    as_reviewer, run, propose, monkeypatch
):
    monkeypatch.setattr(runs_views, "TABLE_ROWS", 3)
    monkeypatch.setattr(runs_views, "TIMELINE_MESSAGES", 3)
    operations = [propose(f"call-{n}") for n in range(5)]
    for n in range(5):
        attach_artifact(run=run, name=f"notes-{n}.txt", content=b"x", actor=AGENT)
        append_message(run=run, kind=MessageKind.AGENT, payload={"text": f"note {n}"}, actor=AGENT)

    page = as_reviewer.get(f"/runs/{run.pk}/").text

    table = page[page.index('aria-label="Operations"') : page.index("<h2>Requests</h2>")]
    shown = [int(pk) for pk in re.findall(r'href="/operations/(\d+)/"', table)]
    assert shown == [op.pk for op in operations[2:]]
    audit = f'href="/audit/?run={run.pk}&amp;event=operation.proposed&amp;sort=run"'
    assert f"The latest 3 operations only. <a {audit}>Every one" in page
    assert re.findall(r">(notes-\d)\.txt</a>", page) == ["notes-2", "notes-3", "notes-4"]
    history = f'<a href="/audit/runs/{run.pk}/">'
    assert f"The latest 3 artifacts only. {history}Every one" in page
    assert "The latest 3 messages of that stretch only; the run's evidence bundle" in page
    timeline = page[page.index('<ol class="timeline">') :]
    assert [n for n in range(5) if f"note {n}" in timeline] == [2, 3, 4]
    assert "requests only" not in page  # none asked, none left out


def test_a_long_run_shows_its_latest_checkpoints_and_points_to_the_rest(
    as_reviewer, run, propose, reviewer2, monkeypatch
):
    monkeypatch.setattr(runs_views, "TIMELINE_CHECKPOINTS", 4)
    early = propose("call-0")
    decide_on(early, reviewer2, "reject", comment="no")
    late = propose("call-1")
    run.refresh_from_db()

    page = as_reviewer.get(f"/runs/{run.pk}/").text

    timeline = page[page.index('<ol class="timeline">') :]
    assert f"{run.version - 4} earlier checkpoints and the messages of that time" in page
    assert f'href="/audit/?run={run.pk}&amp;sort=run">Every checkpoint, in order</a>' in page
    assert "<code>run.created</code>" not in timeline
    assert f'href="/operations/{late.pk}/"' in timeline
    assert f'href="/operations/{early.pk}/"' not in timeline


def test_a_short_run_shows_its_whole_story(as_reviewer, run, propose):
    propose("call-0")
    page = as_reviewer.get(f"/runs/{run.pk}/").text
    assert 'id="timeline-earlier"' not in page
    assert "<code>run.created</code>" in page[page.index('<ol class="timeline">') :]
