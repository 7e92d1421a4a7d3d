"""``POST /operations/{pk}/heartbeat``: the agent renews the lease of an operation it
executes while its function (or undo) runs, in the database's clock and only while its
epoch holds a live lease; otherwise 409, so that it learns it lost it."""

from datetime import datetime, timedelta

import pytest

from runs.clock import db_now
from runs.models import Checkpoint, Operation
from tests.api_helpers import agent_proposal, problem
from tests.helpers import decide_on, stored
from tests.processes import wait_until

pytest_plugins = ["tests.api_helpers"]


@pytest.fixture
def claimed(api, run, reviewer) -> Operation:
    """An agent-executed operation, approved and claimed (epoch 1) for a minute."""
    op = Operation.objects.get(pk=api.propose(run.pk, agent_proposal()).json()["id"])
    decide_on(op, reviewer)
    response = api.post(f"/operations/{op.pk}/claim", {"lease_seconds": 60})
    assert response.status_code == 200, response.content
    assert response.json()["lease_seconds"] == 60  # what each heartbeat renews it by
    op.refresh_from_db()
    return op


def beat(api, op: Operation, epoch: int = 1, lease_seconds: int = 600):
    return api.post(
        f"/operations/{op.pk}/heartbeat", {"epoch": epoch, "lease_seconds": lease_seconds}
    )


def lapse(op: Operation) -> None:
    """Move the lease a second into the past, in the database's clock."""
    Operation.objects.filter(pk=op.pk).update(lease_expires_at=db_now() - timedelta(seconds=1))


def expiry(op: Operation):
    op.refresh_from_db()
    return op.lease_expires_at


def test_a_heartbeat_extends_the_lease_from_now_in_the_database_clock(api, claimed):
    before = db_now()
    response = beat(api, claimed, lease_seconds=600)
    after = db_now()
    assert response.status_code == 200, response.content
    expires = expiry(claimed)
    assert before + timedelta(seconds=600) <= expires <= after + timedelta(seconds=600)
    lease = response.json()
    assert (lease["owner"], lease["epoch"]) == ("test-agent", 1)
    # JSON keeps milliseconds.
    assert abs(datetime.fromisoformat(lease["expires_at"]) - expires) < timedelta(milliseconds=1)
    assert api.get(f"/operations/{claimed.pk}").json()["lease"]["epoch"] == 1


def test_a_renewed_lease_is_not_taken_over_when_it_would_have_lapsed(api, claimed):
    lapsing = db_now() + timedelta(milliseconds=300)
    Operation.objects.filter(pk=claimed.pk).update(lease_expires_at=lapsing)
    assert beat(api, claimed, lease_seconds=60).status_code == 200
    wait_until(lambda: db_now() > lapsing, message="the old lease's end")
    takeover = api.post(f"/operations/{claimed.pk}/claim", {})
    assert problem(takeover, 409)["error"] == "stale_version"


def test_a_heartbeat_writes_no_checkpoint(api, claimed):
    checkpoints = Checkpoint.objects.count()
    version = claimed.version
    assert beat(api, claimed).status_code == 200
    claimed.refresh_from_db()
    assert (Checkpoint.objects.count(), claimed.version) == (checkpoints, version)


def test_the_wrong_epoch_is_a_conflict_and_renews_nothing(api, claimed):
    expires = expiry(claimed)
    body = problem(beat(api, claimed, epoch=2), 409)
    assert body["error"] == "stale_version"
    assert "epoch 2 no longer holds it" in body["detail"]
    assert expiry(claimed) == expires


def test_a_lapsed_lease_is_a_conflict_and_stays_lapsed(api, claimed):
    lapse(claimed)
    expires = expiry(claimed)
    body = problem(beat(api, claimed), 409)
    assert body["error"] == "stale_version"
    assert "lapsed" in body["detail"]
    assert expiry(claimed) == expires


def test_after_a_takeover_the_earlier_epoch_has_lost_its_lease(api, claimed):
    lapse(claimed)
    assert api.post(f"/operations/{claimed.pk}/claim", {"lease_seconds": 60}).status_code == 200
    expires = expiry(claimed)
    assert problem(beat(api, claimed, epoch=1), 409)["error"] == "stale_version"
    assert expiry(claimed) == expires
    assert beat(api, claimed, epoch=2).status_code == 200


def test_a_lease_awaiting_its_rollback_is_renewed_while_the_undo_runs(api, claimed):
    api.post(f"/operations/{claimed.pk}/intent", {"epoch": 1})
    api.post(f"/operations/{claimed.pk}/report", {"epoch": 1, "effect": "uncertain"})
    assert beat(api, claimed).status_code == 200
    assert expiry(claimed) > db_now() + timedelta(seconds=500)


def test_an_operation_that_ended_has_no_lease_to_renew(api, claimed):
    api.post(f"/operations/{claimed.pk}/intent", {"epoch": 1})
    api.post(f"/operations/{claimed.pk}/report", {"epoch": 1, "effect": "applied"})
    assert problem(beat(api, claimed), 409)["error"] == "stale_version"
    assert expiry(claimed) is None


def test_an_operation_not_yet_claimed_has_no_lease_to_renew(api, run, reviewer):
    op = Operation.objects.get(pk=api.propose(run.pk, agent_proposal()).json()["id"])
    decide_on(op, reviewer)
    before = stored()
    assert problem(beat(api, op, epoch=0), 409)["error"] == "stale_version"
    assert stored() == before


def test_another_projects_token_finds_no_such_operation(other_api, claimed):
    expires = expiry(claimed)
    problem(beat(other_api, claimed), 404)
    assert expiry(claimed) == expires


def test_an_operation_oversight_executes_has_no_agent_lease(api, run, reviewer):
    op = Operation.objects.get(pk=api.propose(run.pk).json()["id"])
    assert op.executor == "server"
    problem(beat(api, op, epoch=0), 422, "operation")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"epoch": 1}, "lease_seconds"),
        ({"lease_seconds": 60}, "epoch"),
        ({"epoch": 1, "lease_seconds": 0}, "lease_seconds"),
        ({"epoch": 1, "lease_seconds": 3601}, "lease_seconds"),
        ({"epoch": "first", "lease_seconds": 60}, "epoch"),
    ],
)
def test_heartbeat_fields_are_checked(api, claimed, body, field):
    expires = expiry(claimed)
    problem(api.post(f"/operations/{claimed.pk}/heartbeat", body), 422, field)
    assert expiry(claimed) == expires


def test_a_heartbeat_is_a_post(api, claimed):
    assert api.get(f"/operations/{claimed.pk}/heartbeat").status_code == 405
