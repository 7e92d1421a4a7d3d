"""``/metrics``, for Prometheus: only with OVERSIGHT_METRICS_TOKEN as a bearer token, no
cookie; the numbers read from the database at each scrape (queues, decisions, ended
operations, durations, lease takeovers, alerts and deliveries, workers), for every
project, in a fixed number of queries however much data there is."""

import time
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from runs.actors import Actor
from runs.clock import db_now
from runs.engine.claims import claim_next
from runs.engine.executor import Execution
from runs.engine.worker import Worker
from runs.models import Decision, Operation, Project, Role, WorkerHeartbeat
from runs.services.pauses import pause_workers
from runs.services.requests import ask
from runs.services.runs import open_session, start_run
from tests.conftest import issued, make_user
from tests.helpers import decide_on, drained, project_settings

TOKEN = "scrape-token-" + "s" * 32
SCRAPE = {"Authorization": f"Bearer {TOKEN}"}
LEASE = timedelta(seconds=30)
IN_BAND = {"rollback_kind": Operation.RollbackKind.IN_BAND}
EMAIL = {
    "arguments": {"to": ["ops@example.com"], "subject": "Report", "body": "All green."},
    "rollback_kind": Operation.RollbackKind.OUT_OF_BAND,
}

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def metrics_token(settings):
    settings.OVERSIGHT_METRICS_TOKEN = TOKEN


def scrape(client) -> dict[str, dict]:
    """``/metrics`` parsed: {sample name: {labels as a sorted tuple of pairs: value}}."""
    response = client.get("/metrics", headers=SCRAPE)
    assert response.status_code == 200
    samples: dict[str, dict] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def by(samples: dict, name: str, *labels: str) -> dict:
    """``name``'s values keyed by the values of ``labels`` (one label: the value itself)."""
    keyed = {}
    for key, value in samples[name].items():
        found = dict(key)
        values = tuple(found[label] for label in labels)
        keyed[values[0] if len(values) == 1 else values] = value
    return keyed


# --- access ---------------------------------------------------------------------------


def test_without_the_setting_there_is_no_metrics_page(client, settings):
    settings.OVERSIGHT_METRICS_TOKEN = ""
    assert client.get("/metrics", headers=SCRAPE).status_code == 404


@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer", "Bearer wrong-token", f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer é"],
)
def test_without_the_token_the_answer_is_401(client, authorization):
    headers = {} if authorization is None else {"Authorization": authorization}
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert b"oversight_" not in response.content
    assert not response.cookies


def test_with_the_token_prometheus_text_and_no_cookie(client):
    response = client.get("/metrics", headers=SCRAPE)
    assert response.status_code == 200
    assert response["Content-Type"] == CONTENT_TYPE_LATEST
    assert response["Content-Type"].startswith("text/plain")
    assert not response.cookies
    assert b"# TYPE oversight_queue_depth gauge" in response.content


def test_only_get(client):
    assert client.post("/metrics", headers=SCRAPE).status_code == 405


def test_answered_over_plain_http_like_the_health_check(client, settings):
    settings.SECURE_SSL_REDIRECT = True  # As in production (tests/settings.py turns it off).
    assert client.get("/metrics", headers=SCRAPE).status_code == 200


def test_a_short_token_stops_start_up(monkeypatch):
    spaced = project_settings(monkeypatch, OVERSIGHT_METRICS_TOKEN=f" {TOKEN}\n")
    assert spaced["OVERSIGHT_METRICS_TOKEN"] == TOKEN
    with pytest.raises(ImproperlyConfigured, match="OVERSIGHT_METRICS_TOKEN"):
        project_settings(monkeypatch, OVERSIGHT_METRICS_TOKEN="guessable")


# --- durations ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["ledger", "http"])
def test_the_worker_records_how_long_effect_and_verification_took(approved, kind):
    op = approved(kind)
    assert (op.execution_ms, op.verification_ms) == (None, None)

    started = time.monotonic()
    op = drained(op)
    elapsed_ms = (time.monotonic() - started) * 1000

    assert op.status == Operation.Status.COMMITTED
    assert op.execution_ms is not None and op.verification_ms is not None
    assert op.execution_ms + op.verification_ms <= elapsed_ms + 1


def test_an_operation_that_never_ran_has_no_durations(propose, reviewer):
    op = propose()
    decide_on(op, reviewer, Decision.Kind.REJECT, comment="Not this month")
    assert (op.execution_ms, op.verification_ms) == (None, None)


def test_durations_fall_in_their_buckets(client, approved):
    """Bucket bounds are inclusive (le), counts cumulative; milliseconds become seconds."""
    ops = [drained(approved("ledger")) for _ in range(4)]
    for op, ms in zip(ops, [50, 51, 1200, 90_000], strict=True):
        Operation.objects.filter(pk=op.pk).update(execution_ms=ms)

    samples = scrape(client)

    buckets = by(samples, "oversight_execution_duration_seconds_bucket", "le")
    assert buckets == {
        "0.05": 1,
        "0.1": 2,
        "0.25": 2,
        "0.5": 2,
        "1.0": 2,
        "2.5": 3,
        "5.0": 3,
        "10.0": 3,
        "30.0": 3,
        "60.0": 3,
        "+Inf": 4,
    }
    assert samples["oversight_execution_duration_seconds_sum"] == {
        (("action", "ledger.transfer"),): pytest.approx(91.301)
    }


# --- a scripted run -------------------------------------------------------------------


@pytest.fixture
def other_run(other_project, outsider):
    token = issued(other_project, "other-agent", outsider)
    session = open_session(project=other_project, owner=outsider, agent="other-agent", token=token)
    return start_run(session=session, goal="Send the weekly report", actor=Actor.agent("other"))


@pytest.fixture
def scripted(settings, approved, propose, reviewer, other_project, other_run):
    """Acme: a ledger transfer and a file write executed by a worker, a transfer taken
    over after its first worker's lease lapsed, one rejected and an action of the
    agent's own rejected, one left proposed, and an
    HTTP request whose verification failed: an open alert whose webhook could not be
    reached. Other: an email sent, two proposals waiting (the older for ten minutes),
    a question waiting. Quiet: nothing at all. Workers: one alive, one stale, one gone."""
    settings.OVERSIGHT_ALERT_WEBHOOK_URL = "http://127.0.0.1:9/hook"  # Refused.
    settings.OVERSIGHT_ALERT_MAX_ATTEMPTS = 1
    Project.objects.create(slug="quiet", name="Quiet")

    drained(approved("ledger"))
    drained(approved("file"))
    taken_over = approved("ledger")
    claim_next(worker="A", lease=timedelta(seconds=1))
    b = claim_next(worker="B", lease=LEASE, now=timezone.now() + timedelta(seconds=5))
    Execution(b, "B", LEASE).run()
    decide_on(propose("rejected"), reviewer, Decision.Kind.REJECT, comment="Not this month")
    agents_own = propose("agents-own", action="dns.update", arguments={"name": "x"})
    decide_on(agents_own, reviewer, Decision.Kind.REJECT, comment="Not that zone")
    propose("waiting")
    drained(approved("http-rigged-no-undo"))

    def email(call_id: str) -> Operation:
        return propose(call_id, target=other_run, action="email.send", **EMAIL)

    decide_on(sent := email("sent"), make_user("other-reviewer", other_project, Role.REVIEWER))
    drained(sent)
    older = email("older")
    Operation.objects.filter(pk=older.pk).update(created_at=db_now() - timedelta(minutes=10))
    email("newer")
    ask(run=other_run, prompt="Which week?", actor=Actor.agent("other"))

    WorkerHeartbeat.objects.create(name="stale", seen_at=db_now() - timedelta(minutes=10))
    WorkerHeartbeat.objects.create(name="gone", seen_at=db_now() - timedelta(days=1))
    taken_over.refresh_from_db()
    assert taken_over.status == Operation.Status.COMMITTED


def test_the_numbers_after_a_scripted_run(client, scripted):
    samples = scrape(client)

    assert by(samples, "oversight_queue_depth", "project") == {"acme": 1, "other": 2, "quiet": 0}
    oldest = by(samples, "oversight_queue_oldest_age_seconds", "project")
    assert oldest["quiet"] == 0
    assert 0 <= oldest["acme"] < 60
    assert 600 <= oldest["other"] < 660
    assert by(samples, "oversight_requests_waiting", "project") == {
        "acme": 0,
        "other": 1,
        "quiet": 0,
    }

    decisions = by(samples, "oversight_decisions_total", "project", "kind")
    assert {key: n for key, n in decisions.items() if n} == {
        ("acme", "approve"): 4,
        ("acme", "reject"): 2,
        ("other", "approve"): 1,
    }
    assert len(decisions) == 3 * len(Decision.Kind)  # Every kind, every project: zeros too.

    assert by(samples, "oversight_operations_total", "project", "action", "status") == {
        ("acme", "ledger.transfer", "committed"): 2,
        ("acme", "file.write", "committed"): 1,
        ("acme", "ledger.transfer", "rejected"): 1,
        ("acme", "other", "rejected"): 1,  # An action an agent named: no series of its own.
        ("acme", "http.request", "alerted"): 1,
        ("other", "email.send", "committed"): 1,
    }

    executed = {"ledger.transfer": 2, "file.write": 1, "http.request": 1, "email.send": 1}
    for kind in ("execution", "verification"):
        name = f"oversight_{kind}_duration_seconds"
        assert by(samples, f"{name}_count", "action") == executed
        buckets = by(samples, f"{name}_bucket", "action", "le")
        assert {action for action, _le in buckets} == set(executed)
        for action, count in executed.items():
            assert buckets[action, "+Inf"] == count
            assert buckets[action, "0.05"] <= buckets[action, "1.0"] <= buckets[action, "60.0"]
            assert samples[f"{name}_sum"][(("action", action),)] >= 0

    assert by(samples, "oversight_lease_takeovers_total", "project") == {
        "acme": 1,
        "other": 0,
        "quiet": 0,
    }
    assert by(samples, "oversight_alerts_open", "project") == {"acme": 1, "other": 0, "quiet": 0}
    assert samples["oversight_alert_deliveries_failed_total"] == {(): 1}
    assert samples["oversight_alert_deliveries_pending"] == {(): 0}

    ages = by(samples, "oversight_worker_heartbeat_age_seconds", "worker")
    assert set(ages) == {"w1", "stale"}  # A worker gone for a day is no longer shown.
    assert 0 <= ages["w1"] < 60 and 600 <= ages["stale"] < 660
    assert samples["oversight_workers_alive"] == {(): 1}


def test_an_empty_installation_answers_zeros(client, project):
    samples = scrape(client)
    assert samples["oversight_queue_depth"] == {(("project", "acme"),): 0}
    assert samples["oversight_queue_oldest_age_seconds"] == {(("project", "acme"),): 0}
    assert samples["oversight_workers_alive"] == {(): 0}
    assert "oversight_operations_total" not in samples
    assert "oversight_execution_duration_seconds_count" not in samples


def test_a_scrape_costs_the_same_queries_however_much_data(
    client, scripted, session, propose, reviewer, django_assert_num_queries
):
    with django_assert_num_queries(11):
        client.get("/metrics", headers=SCRAPE)

    Project.objects.create(slug="more", name="More")
    more = start_run(session=session, goal="Write more notes", actor=Actor.agent("test-agent"))
    for n in range(3):
        arguments = {"path": f"notes/{n}.md", "content": "more\n", "expected_sha256": None}
        op = propose(f"more-{n}", target=more, action="file.write", arguments=arguments, **IN_BAND)
        decide_on(op, reviewer)
    propose("more-waiting", target=more, action="dns.update", arguments={"name": "x"})
    Worker(name="w2").drain()
    assert Operation.objects.filter(execution_ms__isnull=False).count() == 8
    with django_assert_num_queries(11):
        client.get("/metrics", headers=SCRAPE)


def test_metrics_show_every_lane_always_and_each_lane_paused(client, settings, propose):
    settings.OVERSIGHT_METRICS_TOKEN = TOKEN
    propose("pay-1")  # A transfer: an operation in the lane "database".
    before = scrape(client)
    pause_workers(actor=Actor.policy("drill"), reason="Drill")
    pause_workers(lane="database", actor=Actor.policy("drill"), reason="Audit")

    after = scrape(client)

    assert before["oversight_workers_paused"] == {(("lane", ""),): 0}
    assert after["oversight_workers_paused"] == {(("lane", ""),): 1, (("lane", "database"),): 1}
