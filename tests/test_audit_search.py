"""The auditor's search at /audit/: each filter, their combinations, what a user may
see, the sort orders and keyset pagination (complete, reversible and stable while new
checkpoints are written), and a query count that does not grow with the history."""

import hashlib
import html
import itertools
import re
from datetime import UTC, datetime, timedelta
from functools import partial

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from runs.actors import Actor
from runs.audit.search import SORTS, AuditFilter, encode_cursor, paginate
from runs.chain import GENESIS, checkpoint_hash, verify_run_chain
from runs.engine.worker import Worker
from runs.models import Checkpoint, Decision, Operation, Preferences, Role, Run
from runs.permissions import role_group
from runs.services.artifacts import attach_artifact
from runs.services.decisions import expire_due_operations
from runs.services.requests import answer, ask
from runs.services.runs import open_session, start_run
from runs.views import audit as audit_views
from tests.conftest import AGENT, make_user
from tests.helpers import decide_on, drained

NOVEMBER = datetime(2025, 11, 14, 9, 0, tzinfo=UTC)
# Still 30 November in UTC, already 1 December in Auckland (UTC+13 in summer).
END_OF_NOVEMBER = datetime(2025, 11, 30, 12, 30, tzinfo=UTC)
BAD_CURSOR = "This page link is not valid any more; showing the first page."
FILE_WRITE = {"path": "reports/q3.md", "content": "Q3\n", "expected_sha256": None}
TRANSFER = {"from": "A", "to": "B", "amount": "100.00"}


def backdate(run: Run, moment: datetime) -> None:
    """Move a run's history to ``moment`` (the services always write "now"), one second
    per checkpoint, and re-link its chain so that it still verifies."""
    run.refresh_from_db()
    previous = GENESIS
    for checkpoint in run.checkpoints.order_by("seq"):
        checkpoint.created_at = moment + timedelta(seconds=checkpoint.seq)
        checkpoint.prev_hash = previous
        checkpoint.hash = previous = checkpoint_hash(checkpoint)
        Checkpoint.objects.filter(pk=checkpoint.pk).update(
            created_at=checkpoint.created_at, prev_hash=checkpoint.prev_hash, hash=checkpoint.hash
        )
    assert verify_run_chain(run) is None


@pytest.fixture
def history(
    project, other_project, session, run, owner, reviewer, reviewer2, outsider, propose, accounts
) -> dict[str, Run]:
    """Four runs in Acme (two sessions) and one in another project, each with one
    operation, by goal:

    - Pay Alpha (November): approved by reviewer with a comment, executed by a worker;
    - File Bravo (November, the same instants as Alpha): a file write reviewer rejects;
    - Check Charlie (30 November UTC, 1 December in Auckland; the helper-bot session):
      a high-risk transfer approved by reviewer (a comment, 1 of 2), then reviewer2,
      executed by the worker;
    - Wait Delta (now; helper-bot): nobody decides, the policy expires it;
    - Visit Echo (project "other"): a stranger rejects it with words Alpha's approval uses;
    - Pay the supplier invoice: the ``run`` fixture, only started.
    """
    helper = open_session(project=project, owner=owner, agent="helper-bot")
    elsewhere = open_session(project=other_project, owner=outsider, agent="test-agent")
    runs = {
        goal: start_run(session=on, goal=goal, actor=AGENT)
        for goal, on in [
            ("Pay Alpha", session),
            ("File Bravo", session),
            ("Check Charlie", helper),
            ("Wait Delta", helper),
            ("Visit Echo", elsewhere),
        ]
    } | {run.goal: run}
    alpha = propose("pay", target=runs["Pay Alpha"], arguments=TRANSFER)
    decide_on(alpha, reviewer, comment="Invoice checked against the PO")
    bravo = propose(
        "file",
        target=runs["File Bravo"],
        action="file.write",
        arguments=FILE_WRITE,
        risk=Operation.Risk.LOW,
        rollback_kind=Operation.RollbackKind.IN_BAND,
    )
    decide_on(bravo, reviewer, Decision.Kind.REJECT, comment="Wrong folder for the report")
    charlie = propose("big", target=runs["Check Charlie"], arguments=TRANSFER, risk="high")
    decide_on(charlie, reviewer, comment="Looks fine to me")
    decide_on(charlie, reviewer2)
    propose("wait", target=runs["Wait Delta"])
    echo = propose("visit", target=runs["Visit Echo"])
    stranger = make_user("stranger", other_project, Role.REVIEWER)
    decide_on(echo, stranger, Decision.Kind.REJECT, comment="Invoice checked elsewhere")
    Worker("test-worker").drain()
    expire_due_operations(now=timezone.now() + timedelta(days=30))
    backdate(runs["Pay Alpha"], NOVEMBER)
    backdate(runs["File Bravo"], NOVEMBER)
    backdate(runs["Check Charlie"], END_OF_NOVEMBER)
    return runs


@pytest.fixture
def as_auditor(client, auditor) -> Client:
    client.force_login(auditor)
    return client


@pytest.fixture
def member_of_both(project, other_project):
    user = make_user("both", project, Role.AUDITOR)
    other_project.memberships.create(user=user, role=role_group(Role.AUDITOR))
    return user


def listed(page: str) -> list[int]:
    """The ids of the checkpoints a search page lists, in the order shown."""
    return [int(pk) for pk in re.findall(r'<a href="/audit/checkpoints/(\d+)/">', page)]


def found(client: Client, query: str = "") -> list[Checkpoint]:
    """The checkpoints the search page lists for ``query``, in the order shown."""
    response = client.get(f"/audit/?{query}")
    assert response.status_code == 200
    by_id = Checkpoint.objects.select_related("run").in_bulk(listed(response.text))
    return [by_id[pk] for pk in listed(response.text)]


def steps(rows: list[Checkpoint]) -> set[tuple[str, str, str]]:
    return {(c.run.goal, c.event, c.to_status) for c in rows}


def ids(rows) -> list[int]:
    return [c.pk for c in rows]


def goals(rows: list[Checkpoint]) -> set[str]:
    return {c.run.goal for c in rows}


# --- Each filter ----------------------------------------------------------------------

ALPHA_APPROVED = ("Pay Alpha", "operation.status", "approved")
BRAVO_REJECTED = ("File Bravo", "operation.status", "rejected")
CHARLIE_FIRST = ("Check Charlie", "operation.approval", "proposed")
CHARLIE_APPROVED = ("Check Charlie", "operation.status", "approved")
CHARLIE_COMMITTED = ("Check Charlie", "operation.status", "committed")
# The worker claims the operation, records its intent, then the verified effect.
WORKER_STEPS = {
    ("Check Charlie", "operation.status", "in_flight"),
    ("Check Charlie", "operation.intent", "in_flight"),
    CHARLIE_COMMITTED,
}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("q=invoice+CHECKED", {ALPHA_APPROVED}),  # a reason, any case
        ("q=wrong+folder", {BRAVO_REJECTED}),
        ("q=looks+fine", {CHARLIE_FIRST}),  # only in the decision's comment
        ("actor=reviewer2", {CHARLIE_APPROVED, ("Check Charlie", "run.status", "queued")}),
        (
            "actor_kind=policy",
            {("Wait Delta", "operation.status", "expired"), ("Wait Delta", "run.status", "queued")},
        ),
        (
            "actor_kind=worker",
            {
                *WORKER_STEPS,
                *(("Pay Alpha", event, status) for _, event, status in WORKER_STEPS),
            },
        ),
        ("event=operation.approval", {CHARLIE_FIRST}),
        ("status=rejected", {BRAVO_REJECTED}),
        ("status=expired", {("Wait Delta", "operation.status", "expired")}),
        ("decision=reject", {BRAVO_REJECTED}),
        ("decision=approve", {ALPHA_APPROVED, CHARLIE_FIRST, CHARLIE_APPROVED}),
        (
            "action=file.write",
            {("File Bravo", "operation.proposed", "proposed"), BRAVO_REJECTED},
        ),
        (
            "risk=high",
            {
                ("Check Charlie", "operation.proposed", "proposed"),
                CHARLIE_FIRST,
                CHARLIE_APPROVED,
                *WORKER_STEPS,
            },
        ),
        # Which operations did reviewer approve in November?
        (
            "actor=reviewer&decision=approve&since=2025-11-01&until=2025-11-30",
            {ALPHA_APPROVED, CHARLIE_FIRST},
        ),
        ("actor=reviewer&decision=approve&since=2025-11-20", {CHARLIE_FIRST}),
        ("actor=reviewer&q=folder&event=operation.status", {BRAVO_REJECTED}),
        ("actor=reviewer2&decision=reject", set()),
        ("risk=high&actor_kind=worker&status=committed", {CHARLIE_COMMITTED}),
    ],
)
def test_each_filter_finds_exactly_its_checkpoints(as_auditor, history, query, expected):
    assert steps(found(as_auditor, query)) == expected


def test_run_session_and_operation_filters(as_auditor, history):
    alpha, charlie, delta = history["Pay Alpha"], history["Check Charlie"], history["Wait Delta"]
    operation = charlie.operations.get()

    by_run = found(as_auditor, f"run={alpha.pk}")
    by_session = found(as_auditor, f"session={charlie.session_id}")
    by_operation = found(as_auditor, f"operation={operation.pk}")

    assert sorted(c.seq for c in by_run) == list(range(1, alpha.checkpoints.count() + 1))
    assert goals(by_run) == {"Pay Alpha"}
    assert set(ids(by_session)) == set(
        Checkpoint.objects.filter(run__in=[charlie, delta]).values_list("pk", flat=True)
    )
    assert steps(by_operation) == {
        ("Check Charlie", "operation.proposed", "proposed"),
        CHARLIE_FIRST,
        CHARLIE_APPROVED,
        *WORKER_STEPS,
    }


def test_project_filter_narrows_to_one_of_the_users_projects(client, member_of_both, history):
    client.force_login(member_of_both)

    assert goals(found(client, "project=other")) == {"Visit Echo"}
    assert goals(found(client, "project=acme")) == set(history) - {"Visit Echo"}
    assert goals(found(client, "q=invoice+checked")) == {"Pay Alpha", "Visit Echo"}


@pytest.fixture
def in_auckland(project):
    user = make_user("nz-auditor", project, Role.AUDITOR)
    Preferences.objects.create(user=user, time_zone="Pacific/Auckland")
    return user


def test_dates_are_whole_days_in_the_users_time_zone(client, project, in_auckland, history):
    in_utc = make_user("utc-auditor", project, Role.AUDITOR)
    last_of_november, first_of_december = (
        "since=2025-11-30&until=2025-11-30",
        "since=2025-12-01&until=2025-12-01",
    )

    client.force_login(in_utc)
    assert goals(found(client, last_of_november)) == {"Check Charlie"}
    assert goals(found(client, first_of_december)) == set()
    client.force_login(in_auckland)
    assert goals(found(client, last_of_november)) == set()
    assert goals(found(client, first_of_december)) == {"Check Charlie"}
    # 09:00 UTC is 22:00 in Auckland: still the until day, which counts whole.
    assert goals(found(client, "until=2025-11-14")) == {"Pay Alpha", "File Bravo"}


def test_first_day_of_the_calendar_east_of_utc_is_refused_not_a_crash(client, in_auckland, history):
    """Midnight of 1 January of year 1 in Auckland is before year 1 in UTC."""
    client.force_login(in_auckland)

    response = client.get("/audit/?since=0001-01-01")

    assert response.status_code == 400
    assert '<p class="error" role="alert">Since: ' in response.text


# --- What a user may see ---------------------------------------------------------------


@pytest.mark.parametrize(
    "query", ["", "q=invoice", "decision=reject", "actor=stranger", "action=ledger.transfer"]
)
def test_other_projects_checkpoints_never_appear(client, auditor, member_of_both, history, query):
    client.force_login(member_of_both)
    assert "Visit Echo" in goals(found(client, query))
    client.force_login(auditor)
    assert "Visit Echo" not in goals(found(client, query))


@pytest.mark.parametrize("role", ["reviewer", "admin_user", "outsider"])
def test_reviewers_and_admins_search_their_own_projects(client, history, role, request):
    """Not only auditors: every member reads the history of the projects they are in
    (the outsider is a member of the other project only)."""
    client.force_login(request.getfixturevalue(role))
    expected = {"Visit Echo"} if role == "outsider" else set(history) - {"Visit Echo"}
    assert goals(found(client, "")) == expected


@pytest.mark.parametrize("field", ["run", "session", "operation"])
def test_pointing_a_filter_at_another_project_finds_nothing(as_auditor, history, field):
    echo = history["Visit Echo"]
    target = {"run": echo.pk, "session": echo.session_id, "operation": echo.operations.get().pk}

    response = as_auditor.get(f"/audit/?{field}={target[field]}")

    assert response.status_code == 200
    assert "No checkpoints match." in response.text
    assert "Visit Echo" not in response.text


# --- Refusals --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("run=abc", "Run: Enter a whole number."),
        ("operation=0", "Operation: Ensure this value is greater than or equal to 1."),
        ("status=asleep", "To status: Select a valid choice. asleep is not one of the available"),
        ("decision=maybe", "Decision: Select a valid choice. maybe is not one of the available"),
        ("since=yesterday", "Since: Enter a valid date."),
        ("since=2025-12-01&until=2025-11-01", "Until: The end date is before the start date."),
        ("project=other", "Project: Select a valid choice. other is not one of the available"),
        ("sort=random", "Sort: Select a valid choice. random is not one of the available"),
        ("q=" + "x" * 201, "Text in reasons and comments: Ensure this value has at most 200"),
        ("run=99999999999999999999", "Run: Ensure this value is less than or equal to"),
        ("session=99999999999999999999", "Session: Ensure this value is less than or equal to"),
        ("until=9999-12-31", "Until: "),  # the day after it is past the calendar's end
    ],
)
def test_invalid_filters_are_refused_with_the_error(as_auditor, history, query, message):
    response = as_auditor.get(f"/audit/?{query}")

    assert response.status_code == 400
    assert f'<p class="error" role="alert">{html.escape(message)}' in response.text
    assert "No checkpoints match." in response.text


@pytest.mark.parametrize("direction", ["after", "before"])
@pytest.mark.parametrize(
    ("sort", "cursor"),
    [
        pytest.param("newest", "not-a-cursor", id="not base64 JSON"),
        pytest.param("newest", encode_cursor(["yesterday", 7]), id="not a time"),
        pytest.param("newest", encode_cursor([NOVEMBER.isoformat()]), id="one value"),
        pytest.param("newest", encode_cursor([NOVEMBER.isoformat(), "7"]), id="id not a number"),
        pytest.param("newest", encode_cursor(["2025-11-14T09:00:00", 7]), id="no time zone"),
        pytest.param("run", encode_cursor([NOVEMBER.isoformat(), 7]), id="another sort's"),
        pytest.param("run", encode_cursor([True, 7]), id="run not a number"),
        pytest.param("run", encode_cursor([2**70, 7]), id="run too large"),
        pytest.param("newest", encode_cursor(["0001-01-01T00:00:00+05:00", 7]), id="too early"),
    ],
)
def test_bad_cursor_shows_the_first_page_with_a_message(
    as_auditor, history, direction, sort, cursor
):
    response = as_auditor.get(f"/audit/?sort={sort}&{direction}={cursor}")

    assert response.status_code == 400
    assert f'<p class="error" role="alert">{BAD_CURSOR}</p>' in response.text
    assert listed(response.text) == ids(found(as_auditor, f"sort={sort}"))


# --- Sorting and pagination ------------------------------------------------------------

KEYS = {
    "newest": lambda c: (c.created_at, c.pk),
    "oldest": lambda c: (c.created_at, c.pk),
    "run": lambda c: (c.run_id, c.seq),
}


@pytest.mark.parametrize("sort", ["", "sort=newest", "sort=oldest", "sort=run"])
def test_sort_orders(as_auditor, history, sort):
    name = sort.removeprefix("sort=") or "newest"
    rows = found(as_auditor, sort)

    assert len(rows) == Checkpoint.objects.filter(run__project__slug="acme").count()
    assert [KEYS[name](c) for c in rows] == sorted(
        (KEYS[name](c) for c in rows), reverse=name == "newest"
    )


def visible(project) -> AuditFilter:
    filters = AuditFilter({}, projects=[project])
    assert filters.is_valid()
    return filters


@pytest.mark.parametrize("sort", list(SORTS))
def test_walking_pages_gives_every_checkpoint_once_and_back_again(project, history, sort):
    queryset, order = visible(project).checkpoints(), SORTS[sort]
    pages = [paginate(queryset, order, size=3)]
    while pages[-1].older:
        pages.append(paginate(queryset, order, after=pages[-1].older, size=3))

    walked = [c.pk for page in pages for c in page.rows]
    assert walked == list(queryset.order_by(*order.order()).values_list("pk", flat=True))
    # Some page ends amid rows that tie on the first sort key (Alpha's and Bravo's
    # checkpoints share their instants): the second key must split them.
    assert any(
        order.key(page.rows[-1])[0] == order.key(following.rows[0])[0]
        for page, following in itertools.pairwise(pages)
    )
    assert pages[0].newer is None and all(page.newer for page in pages[1:])
    for previous, page in itertools.pairwise(pages):
        back = paginate(queryset, order, before=page.newer, size=3)
        assert ids(back.rows) == ids(previous.rows)
        assert (back.newer, back.older) == (previous.newer, previous.older)


@pytest.fixture
def small_pages(monkeypatch):
    """Five rows a page in the view. (``PAGE_SIZE`` is bound as ``paginate``'s default
    when the module loads, so patching it would change nothing.)"""
    monkeypatch.setattr(audit_views, "paginate", partial(paginate, size=5))


def links(client: Client, url: str) -> tuple[list[int], str | None, str | None]:
    """A page's checkpoint ids and its previous and next links."""
    page = client.get(url).text
    rows = listed(page)
    prev, next_ = (re.search(rf'<a href="([^"]+)" rel="{rel}">', page) for rel in ("prev", "next"))
    return (
        rows,
        prev and "/audit/" + html.unescape(prev[1]),
        next_ and "/audit/" + html.unescape(next_[1]),
    )


def test_page_links_walk_a_filtered_search_there_and_back(as_auditor, history, small_pages):
    url, pages = "/audit/?actor_kind=agent&sort=oldest", []
    while url:
        rows, prev, url = links(as_auditor, url)
        pages.append((rows, prev))
        assert url is None or ("actor_kind=agent" in url and "sort=oldest" in url)

    expected = Checkpoint.objects.filter(run__project__slug="acme", actor_kind="agent")
    walked = [pk for rows, _ in pages for pk in rows]
    assert walked == list(expected.order_by("created_at", "id").values_list("pk", flat=True))
    assert len(pages) > 2 and pages[0][1] is None
    for (earlier, _), (_, prev) in itertools.pairwise(pages):
        assert links(as_auditor, prev)[0] == earlier


def write_more(history: dict[str, Run]) -> None:
    """New checkpoints from several writers: a new run, an artifact on an older run."""
    run = start_run(session=history["Pay Alpha"].session, goal="Arrive Foxtrot", actor=AGENT)
    attach_artifact(run=run, name="notes.txt", content=b"late", actor=AGENT)
    attach_artifact(run=history["Wait Delta"], name="notes.txt", content=b"later", actor=AGENT)


@pytest.mark.parametrize("sort", ["newest", "oldest"])
def test_next_page_is_stable_while_new_checkpoints_arrive(as_auditor, history, small_pages, sort):
    first, _, next_url = links(as_auditor, f"/audit/?sort={sort}")
    second = links(as_auditor, next_url)[0]
    written = Checkpoint.objects.count()

    write_more(history)

    assert Checkpoint.objects.count() == written + 4
    again, prev_url, _ = links(as_auditor, next_url)
    assert again == second
    assert links(as_auditor, prev_url)[0] == first
    # Newest first, the new checkpoints lead a fresh first page; oldest first, the end.
    fresh = links(as_auditor, f"/audit/?sort={sort}")[0]
    assert (fresh == first) == (sort == "oldest")


# --- Query counts ----------------------------------------------------------------------


@pytest.fixture
def big_history(request, session, run, propose, reviewer) -> tuple[Run, Checkpoint]:
    """``request.param`` checkpoints in Acme: nine through the services (an approval
    with a comment, an artifact, a second run), the rest bulk-created filler over both
    runs (their chains do not matter here), a quarter of it about the operation."""
    operation = propose("call-1")
    decide_on(operation, reviewer, comment="fine")
    attach_artifact(run=run, name="report.txt", content=b"v1", actor=AGENT)
    runs = [run, start_run(session=session, goal="Another run", actor=AGENT)]
    now, worker = timezone.now(), Actor.worker("filler")
    Checkpoint.objects.bulk_create(
        Checkpoint(
            run=runs[n % 2],
            project_id=run.project_id,
            seq=1000 + n,
            created_at=now - timedelta(seconds=n),
            actor_kind=AGENT.kind if n % 2 else worker.kind,
            actor_label=AGENT.label if n % 2 else worker.label,
            operation=operation if n % 4 == 0 else None,
            event="run.status",
            from_status="running",
            to_status="waiting",
            reason=f"filler {n}",
            state={"decision": {"kind": "approve", "comment": f"fine {n}"}} if n % 5 == 0 else {},
            hash=hashlib.sha256(f"filler {n}".encode()).hexdigest(),
        )
        for n in range(request.param - Checkpoint.objects.count())
    )
    assert Checkpoint.objects.count() == request.param
    return run, operation.checkpoints.get(to_status="approved")


@pytest.mark.parametrize("big_history", [10, 10_000], indirect=True)
def test_query_count_does_not_grow_with_the_history(
    client, auditor, big_history, django_assert_max_num_queries
):
    run, checkpoint = big_history
    middle = Checkpoint.objects.order_by("created_at", "id")[Checkpoint.objects.count() // 2]
    client.force_login(auditor)
    client.get("/audit/")  # The first visit stores the time zone in the session.
    urls = [
        "/audit/?project=acme&decision=approve&q=fine&since=2020-01-01",
        f"/audit/?sort=oldest&risk=medium&after={encode_cursor(SORTS['oldest'].key(middle))}",
        f"/audit/checkpoints/{checkpoint.pk}/",
        f"/audit/checkpoints/{checkpoint.pk}/?against=1",
        f"/audit/runs/{run.pk}/",
    ]
    for url in urls:
        with django_assert_max_num_queries(8):
            response = client.get(url)
        assert response.status_code == 200, url
        assert "No checkpoints match." not in response.text, url


def test_engine_retries_and_rollback_steps_can_be_searched(as_auditor, approved, settings):
    """An attempt that failed (the precondition's service refused the connection) and a
    rollback step against a target that does not deduplicate are transitions of their
    own, which an auditor can ask for."""
    unreachable = "127.0.0.1:1"
    settings.OVERSIGHT_HTTP_ALLOWED_HOSTS = [*settings.OVERSIGHT_HTTP_ALLOWED_HOSTS, unreachable]
    retried = approved("http", precondition={"url": f"http://{unreachable}/status"})
    compensated = drained(approved("http-rigged"))
    drained(retried)

    (attempt,) = found(as_auditor, "event=operation.attempt_failed")
    (step,) = found(as_auditor, "event=operation.rollback_intent")

    assert (attempt.operation_id, step.operation_id) == (retried.pk, compensated.pk)
    assert "refused the connection" in attempt.reason
    assert compensated.status == "compensated"


def test_human_requests_and_their_answers_can_be_searched(as_auditor, run, reviewer):
    """A question asked and its answer are transitions of their own: an auditor filters
    for them, and for the statuses requests reach."""
    human, _ = ask(run=run, prompt="Which region?", actor=AGENT, choices=["eu", "us"])
    answer(request=human, reviewer=reviewer, kind="choose", data="eu", version=human.version)

    (asked,) = found(as_auditor, "event=request.created")
    (answered,) = found(as_auditor, "event=request.status&to_status=answered")

    assert (asked.request_id, answered.request_id) == (human.pk, human.pk)
    assert answered.actor_user == reviewer


def test_free_text_is_served_by_trigram_indexes_on_postgresql(project, history):
    """A word that matches nothing must not read every checkpoint: on PostgreSQL the
    search's two ``icontains`` are each served by a trigram index of migration 0016,
    which only an expression spelt exactly as Django writes it can be."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has no trigram index: the search reads newest first")
    filters = AuditFilter({"q": "no-such-word"}, projects=[project])
    with connection.cursor() as cursor:
        # The table is tiny here: only an index that can serve the words may be used.
        cursor.execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_indexscan = off")
    plan = filters.checkpoints().order_by("-created_at", "-id")[:50].explain()
    assert "checkpoint_reason_trgm" in plan and "checkpoint_comment_trgm" in plan, plan
