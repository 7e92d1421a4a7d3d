"""Lanes: every operation names the target its effect waits on, a claim passes over the
lanes a worker closed, and a lane's limit and circuit breaker close it as they should.
(The same with real worker processes and real targets: ``test_worker_effects``.)"""

from datetime import timedelta

import pytest

from runs.engine.claims import claim_next
from runs.engine.lanes import Lanes
from tests.conftest import http_arguments
from tests.helpers import decide_on
from tests.processes import wait_until

pytestmark = pytest.mark.django_db


def test_each_operation_is_in_the_lane_of_its_target(approved, project, target):
    host = target.base.removeprefix("http://")
    assert approved("http").lane == f"http.request {host}"
    assert approved("ledger").lane == "database"
    assert approved("file").lane == f"file.write project {project.pk}"
    assert approved("email").lane == "email.send"


def test_an_action_not_registered_here_is_a_lane_of_its_own(propose):
    assert propose(action="crm.update", arguments={"id": 1}).lane == "crm.update"


def test_an_edit_to_another_host_moves_the_operation_to_that_host_s_lane(
    propose, reviewer, target, settings
):
    settings.OVERSIGHT_HTTP_ALLOWED_HOSTS = [*settings.OVERSIGHT_HTTP_ALLOWED_HOSTS, "other:8080"]
    op = propose(
        action="http.request", arguments=http_arguments(target.base), rollback_kind="out_of_band"
    )
    edited = http_arguments("http://other:8080")
    decide_on(op, reviewer, "edit", arguments=edited)
    op.refresh_from_db()
    assert op.arguments["url"] == edited["url"]
    assert op.lane == "http.request other:8080"


def test_a_claim_passes_over_the_lanes_it_is_told_to_skip(approved):
    http, file = approved("http"), approved("file")
    lease = timedelta(seconds=60)
    assert claim_next(worker="w", lease=lease, skip={http.lane}).pk == file.pk
    assert claim_next(worker="w", lease=lease, skip={http.lane}) is None
    assert claim_next(worker="w", lease=lease).pk == http.pk


def breakers(**kwargs) -> Lanes:
    return Lanes(**{"limit": 2, "failures": 3, "backoff": 0.05, "longest": 0.2, **kwargs})


def test_a_full_lane_is_closed_until_one_of_its_effects_ends():
    lanes = breakers()
    lanes.enter("slow")
    assert lanes.closed() == set()
    lanes.enter("slow")
    assert lanes.closed() == {"slow"}
    lanes.leave("slow")
    assert lanes.closed() == set()


def test_a_lane_pauses_after_failures_in_a_row_and_an_answer_between_resets_them():
    changes = []
    lanes = breakers(on_change=lambda: changes.append(set(lanes.paused())))
    for healthy in (False, False, True, False, False):
        lanes.answered("dead", healthy)
    assert lanes.closed() == set() and changes == []
    lanes.answered("dead", False)
    assert lanes.closed() == {"dead"}
    assert changes == [{"dead"}]
    assert lanes.paused()["dead"]["failures"] == 3


def test_after_the_backoff_one_trial_goes_and_its_answer_closes_the_breaker():
    changes = []
    lanes = breakers(on_change=lambda: changes.append(set(lanes.paused())))
    for _ in range(3):
        lanes.answered("dead", False)
    wait_until(lambda: "dead" not in lanes.closed(), message="the backoff to pass")
    lanes.enter("dead")  # The trial.
    assert "dead" in lanes.closed(), "nothing else goes while the trial is out"
    lanes.answered("dead", True)
    lanes.leave("dead")
    assert lanes.closed() == set() and lanes.paused() == {}
    assert changes == [{"dead"}, set()]


def test_a_failed_trial_pauses_the_lane_for_twice_as_long_up_to_the_longest():
    lanes = breakers()
    for _ in range(3):
        lanes.answered("dead", False)
    backoffs = []
    for _ in range(4):
        wait_until(lambda: "dead" not in lanes.closed(), message="the backoff to pass")
        lanes.enter("dead")
        lanes.answered("dead", False)
        lanes.leave("dead")
        backoffs.append(lanes.breakers["dead"].backoff)
    assert backoffs == [0.1, 0.2, 0.2, 0.2]


def test_a_trial_that_never_reached_its_target_lets_another_go():
    lanes = breakers()
    for _ in range(3):
        lanes.answered("dead", False)
    wait_until(lambda: "dead" not in lanes.closed(), message="the backoff to pass")
    lanes.enter("dead")
    lanes.leave("dead")  # It failed before any request (a precondition, say).
    assert "dead" not in lanes.closed()
    assert "dead" in lanes.paused()
