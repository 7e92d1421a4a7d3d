"""The alert card says what verification saw after the effect, beside the state left
from before it: the verdict and its reason, from the checkpoint that recorded the
verification failure (which every alerted operation went through). Verification keeps
only its verdict, not what it read at the target, and the card says so rather than
suggest otherwise."""

import html

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.engine.worker import Worker
from runs.models import Alert, Checkpoint
from runs.services.runs import start_run
from tests.conftest import AGENT, http_arguments
from tests.helpers import decide_on


@pytest.fixture
def alert(approved, admin_user) -> Alert:
    """A target that answers 200 to the call but never shows the effect, with no undo:
    verification cannot tell, and the plan is a person (an alert)."""
    op = approved("http-rigged-no-undo")
    Worker().drain()
    return Alert.objects.get(operation=op)


def test_the_card_shows_the_verdict_verification_recorded(client, reviewer, alert):
    verified = Checkpoint.objects.get(
        operation=alert.operation, event="operation.status", to_status="verify_failed"
    )
    client.force_login(reviewer)

    page = client.get("/alerts/").text

    card = page[page.index(f'id="alert-{alert.pk}"') :]
    assert "What verification saw after the effect" in card
    assert "It could not confirm the effect:</strong> " in card
    assert html.escape(verified.reason) in card
    assert f'href="/audit/checkpoints/{verified.pk}/"' in card
    assert "not what it read at the target" in card


def test_an_alert_with_no_operation_has_no_verification_to_show(client, reviewer, run):
    Alert.objects.create(project=run.project, run=run, operation=None, summary="By hand")
    client.force_login(reviewer)

    page = client.get("/alerts/").text

    assert "What verification saw after the effect" not in page


def test_the_verdicts_cost_one_query_however_many_alerts(
    client, reviewer, alert, propose, session, target, django_assert_num_queries
):
    """A second alert, of an operation in another run, adds no query to the page."""
    client.force_login(reviewer)
    client.get("/alerts/")  # The first visit stores the time zone in the session.
    with CaptureQueriesContext(connection) as one:
        client.get("/alerts/")
    other = start_run(session=session, goal="Another call", actor=AGENT)
    decide_on(
        propose(
            "rigged-again",
            target=other,
            action="http.request",
            arguments=http_arguments(target.base, "rigged"),
            rollback_kind="out_of_band",
        ),
        reviewer,
    )
    Worker().drain()

    with django_assert_num_queries(len(one)):
        page = client.get("/alerts/").text

    assert page.count("It could not confirm the effect:") == 2
