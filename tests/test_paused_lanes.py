"""A lane a live worker paused (its target stopped answering) shows on ``/healthz``
(counted, naming no host; the answer still ok: a dead target is not Oversight
unhealthy), on ``/metrics`` (``oversight_lane_paused``) and on the page of each
operation it holds up ("Waiting: the target … stopped answering since …"). A dead
worker's pauses are its last word, not news: they show nowhere. The pauses are written
by a real breaker (``Lanes``), as the worker writes them."""

import re
from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils.html import strip_tags

from runs.clock import db_now
from runs.engine.lanes import Lanes
from runs.models import Operation, WorkerHeartbeat
from runs.templatetags.oversight import when
from tests.helpers import decide_on, drained, page_of
from tests.test_metrics import EMAIL, SCRAPE, TOKEN, by, scrape

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}
BACKOFF = 600  # Seconds: the next trial stays "in 9 minutes" for the whole test.


def paused_by(worker: str, *lanes: str, seen_ago: float = 5) -> WorkerHeartbeat:
    """``worker``'s heartbeat ``seen_ago`` seconds ago, with ``lanes`` paused as its
    breakers pause them: each target failed once, with a breaker that opens on one."""
    breakers = Lanes(limit=1, failures=1, backoff=BACKOFF, longest=BACKOFF)
    for lane in lanes:
        breakers.answered(lane, healthy=False)
    return WorkerHeartbeat.objects.create(
        name=worker,
        seen_at=db_now() - timedelta(seconds=seen_ago),
        paused_lanes=breakers.paused(),
    )


@pytest.fixture
def dead_ago(settings) -> float:
    """Seconds since a heartbeat that ``/healthz`` no longer counts as alive."""
    return settings.OVERSIGHT_HEALTH_WORKER_SECONDS + 5


@pytest.fixture
def as_reviewer(client, reviewer):
    client.force_login(reviewer)
    return client


def waiting_line(page: str) -> str | None:
    """The "Waiting: …" line of an operation's status panel, as read (tags stripped)."""
    found = re.search(r'<p class="notice">(Waiting: .*?)</p>', page, re.DOTALL)
    return strip_tags(found[1]) if found else None


def said(moment: str) -> str:
    """A moment the worker wrote, as the pages show it (read as text)."""
    return strip_tags(when(datetime.fromisoformat(moment)))


# --- /healthz ---------------------------------------------------------------------------


def test_healthz_counts_live_workers_paused_lanes_names_none_and_stays_ok(client, dead_ago):
    paused_by("web-1:41", "http.request api.example.com", "email.send")
    paused_by("web-2:43", "email.send")
    paused_by("web-3:42", "file.write project 3", seen_ago=dead_ago)

    response = client.get("/healthz")

    assert response.status_code == 200
    body = response.json()
    assert (body["ok"], body["status"]) == (True, "ok")
    assert body["checks"]["lanes"] == {"ok": True, "paused": 2}
    assert "api.example.com" not in response.content.decode()


def test_healthz_counts_a_lane_by_the_rule_it_counts_workers_by(client, settings):
    """Seen just within the limit, a worker is alive and its pause listed; just past
    it, the worker is down (the answer says so) and its pause is not."""
    alive_for = settings.OVERSIGHT_HEALTH_WORKER_SECONDS
    paused_by("worker", "email.send", seen_ago=alive_for - 5)
    within = client.get("/healthz").json()["checks"]
    assert within["workers"]["ok"] is True
    assert within["lanes"]["paused"] == 1

    WorkerHeartbeat.objects.update(seen_at=db_now() - timedelta(seconds=alive_for + 5))
    past = client.get("/healthz").json()["checks"]
    assert past["workers"]["ok"] is False
    assert past["lanes"] == {"ok": True, "paused": 0}


# --- /metrics ---------------------------------------------------------------------------


def test_metrics_show_each_lane_live_workers_paused(client, settings, dead_ago):
    settings.OVERSIGHT_METRICS_TOKEN = TOKEN
    paused_by("a:1", "http.request api.example.com", "email.send")
    paused_by("b:2", "http.request api.example.com")
    paused_by("c:3", "file.write project 3", seen_ago=dead_ago)

    assert by(scrape(client), "oversight_lane_paused", "lane") == {
        "http.request api.example.com": 2,  # Two workers paused it.
        "email.send": 1,
    }
    text = client.get("/metrics", headers=SCRAPE).text
    assert "# TYPE oversight_lane_paused gauge" in text
    assert "# HELP oversight_lane_paused Live workers that paused the lane" in text


def test_a_lane_s_name_is_escaped_as_a_label_value(client, settings):
    settings.OVERSIGHT_METRICS_TOKEN = TOKEN
    odd = 'http.request "quoted"\\host\nnext'
    paused_by("a:1", odd)

    text = client.get("/metrics", headers=SCRAPE).text

    assert 'oversight_lane_paused{lane="http.request \\"quoted\\"\\\\host\\nnext"} 1.0' in text
    assert by(scrape(client), "oversight_lane_paused", "lane") == {odd: 1}


def test_no_lane_paused_no_series_but_the_family_is_described(client, settings, dead_ago):
    settings.OVERSIGHT_METRICS_TOKEN = TOKEN
    paused_by("gone:1", "email.send", seen_ago=dead_ago)
    text = client.get("/metrics", headers=SCRAPE).text
    assert "# TYPE oversight_lane_paused gauge" in text
    assert "oversight_lane_paused{" not in text


# --- The operation's page -----------------------------------------------------------------


def test_the_page_of_an_operation_held_up_says_it_waits_and_until_when(as_reviewer, approved):
    op = approved("http")
    assert waiting_line(as_reviewer.get(page_of(op)).text) is None

    pauses = paused_by("w:1", op.lane).paused_lanes[op.lane]
    page = as_reviewer.get(page_of(op)).text

    assert waiting_line(page) == (
        f"Waiting: the target ({op.lane}) stopped answering since {said(pauses['since'])}; "
        f"the worker tries again at {said(pauses['retry_at'])}."
    )
    assert "(in 9\N{NO-BREAK SPACE}minutes)." in waiting_line(page)


def test_a_dead_worker_s_pause_holds_nothing_up(as_reviewer, approved, dead_ago):
    op = approved("http")
    paused_by("gone:1", op.lane, seen_ago=dead_ago)
    assert waiting_line(as_reviewer.get(page_of(op)).text) is None


def test_an_operation_in_another_lane_is_not_waiting(as_reviewer, approved):
    file, http = approved("file"), approved("http")
    paused_by("w:1", http.lane)
    assert waiting_line(as_reviewer.get(page_of(file)).text) is None


@pytest.mark.parametrize("status", ["in_flight", "verify_failed"])
def test_an_operation_a_worker_holds_is_waiting_too(as_reviewer, approved, status):
    op = approved("http")
    Operation.objects.filter(pk=op.pk).update(status=status)
    paused_by("w:1", op.lane)
    assert waiting_line(as_reviewer.get(page_of(op)).text).startswith("Waiting: the target")


def test_an_operation_no_worker_has_to_carry_out_is_not_waiting(
    as_reviewer, approved, propose, reviewer
):
    """Proposed (no decision yet), ended, or the agent's own to execute: a paused lane
    holds none of these up."""
    proposed = propose("waiting", action="email.send", **EMAIL)
    committed = drained(approved("file"))
    agents = propose("agents-own", action="crm.update", arguments={"id": 1})
    decide_on(agents, reviewer)
    assert (agents.status, agents.executor) == ("approved", "agent")
    paused_by("w:1", proposed.lane, committed.lane, agents.lane)

    for op in (proposed, committed, agents):
        assert waiting_line(as_reviewer.get(page_of(op)).text) is None


def test_the_lane_s_name_is_escaped(as_reviewer, approved):
    op = approved("http")
    lane = '<img src=x onerror="alert(1)"> & co'
    Operation.objects.filter(pk=op.pk).update(lane=lane)
    paused_by("w:1", lane)

    page = as_reviewer.get(page_of(op)).text

    assert "the target (&lt;img src=x onerror=&quot;alert(1)&quot;&gt; &amp; co)" in page
    assert "<img src=x" not in page


def test_the_status_panel_shows_a_pause_that_began_after_the_page_loaded(as_reviewer, approved):
    """The panel polls with what it shows: the operation waits unchanged, but the pause
    is news, swapped in once; then unchanged again (204) until the pause moves on."""
    op = approved("http")
    outcome = f"/operations/{op.pk}/outcome/"
    version = re.search(r'"version": "([^"]+)"', as_reviewer.get(page_of(op)).text)[1]
    assert as_reviewer.get(outcome, {"version": version}, headers=HTMX).status_code == 204

    paused_by("w:1", op.lane)
    panel = as_reviewer.get(outcome, {"version": version}, headers=HTMX)

    assert panel.status_code == 200
    assert waiting_line(panel.text).startswith(f"Waiting: the target ({op.lane})")
    shown = re.search(r'"version": "([^"]+)"', panel.text)[1]
    assert as_reviewer.get(outcome, {"version": shown}, headers=HTMX).status_code == 204

    WorkerHeartbeat.objects.update(paused_lanes={})  # The target answered again.
    cleared = as_reviewer.get(outcome, {"version": shown}, headers=HTMX)
    assert cleared.status_code == 200 and waiting_line(cleared.text) is None


def test_the_page_reads_the_pauses_in_one_query_and_only_when_one_may_hold_it_up(
    as_reviewer, approved, propose
):
    """However many workers and lanes; none read for an operation awaiting a decision."""
    held, proposed = approved("http"), propose("waiting")
    for n in range(3):
        paused_by(f"w:{n}", held.lane, f"lane {n}", "email.send")

    def heartbeat_reads(op: Operation) -> int:
        as_reviewer.get(page_of(op))  # The first visit stores the time zone in the session.
        with CaptureQueriesContext(connection) as queries:
            assert as_reviewer.get(page_of(op)).status_code == 200
        return sum("workerheartbeat" in query["sql"] for query in queries.captured_queries)

    assert heartbeat_reads(held) == 1
    assert heartbeat_reads(proposed) == 0
