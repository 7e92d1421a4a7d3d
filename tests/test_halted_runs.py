"""A halted run is not left by finishing it (issue #11, hole 8): while an alert is open
on a run, its agent can neither finish it nor retry it; an admin can still cancel it.
With the project's ``alerts_pause_agent``, the agent's other runs take no new proposals
or claims until a person resolves the alert."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from runs.models import Alert, Operation, Run
from runs.services.alerts import acknowledge_alert, resolve_alert
from tests.api_helpers import Api, agent_proposal, issued, problem
from tests.helpers import decide_on

pytest_plugins = ["tests.api_helpers"]


def open_run(api: Api, goal: str = "Push the release") -> Run:
    session = api.post("/sessions", {"title": goal}).json()["id"]
    response = api.post("/runs", {"session": session, "goal": goal})
    assert response.status_code == 201, response.content
    return Run.objects.get(pk=response.json()["id"])


def approved(api: Api, run: Run, reviewer, call_id: str = "push-1") -> Operation:
    """An agent-executed operation of ``run``, approved by ``reviewer``."""
    op = Operation.objects.get(pk=api.propose(run.pk, agent_proposal(call_id)).json()["id"])
    decide_on(op, reviewer)
    return op


def claim(api: Api, op: Operation):
    return api.post(f"/operations/{op.pk}/claim", {})


def halted(api: Api, run: Run, reviewer) -> Alert:
    """The run's operation fails its verification and the agent asks for an alert."""
    op = approved(api, run, reviewer, "push-halt")
    for name, body in [
        ("claim", {}),
        ("intent", {"epoch": 1, "snapshot": {}}),
        ("report", {"epoch": 1, "effect": "uncertain"}),
        ("rollback", {"epoch": 1, "outcome": "alert", "detail": "the push half-landed"}),
    ]:
        assert api.post(f"/operations/{op.pk}/{name}", body).status_code == 200
    run.refresh_from_db()
    assert (run.status, run.reason) == ("waiting", "reconciliation")
    return Alert.objects.get(operation=op)


def refused_for(response, run: Run, alert: Alert) -> dict:
    body = problem(response, 409)
    assert body["error"] == "run_not_accepting"
    assert (
        f"run {run.pk} has an open alert ({alert.pk}); a person must resolve it" in (body["detail"])
    )
    return body


@pytest.fixture
def run(api) -> Run:
    return open_run(api)


@pytest.fixture
def alert(api, run, reviewer) -> Alert:
    return halted(api, run, reviewer)


def retry(api: Api, run: Run):
    return api.post("/runs", {"session": run.session_id, "goal": run.goal, "retry_of": run.pk})


# --- the halted run itself ----------------------------------------------------------------


@pytest.mark.parametrize("status", ["completed", "partial", "failed"])
def test_the_agent_cannot_finish_a_run_with_an_open_alert(api, run, alert, admin_user, status):
    body = {"status": status, "outcome": "giving up"}

    refused_for(api.post(f"/runs/{run.pk}/finish", body), run, alert)
    run.refresh_from_db()
    assert (run.status, run.reason) == ("waiting", "reconciliation")

    resolve_alert(alert=alert, user=admin_user, note="Reset the remote by hand.")

    response = api.post(f"/runs/{run.pk}/finish", body)
    assert response.status_code == 200, response.content
    assert response.json()["status"] == status


def test_an_acknowledged_alert_is_still_open(api, run, alert, admin_user):
    acknowledge_alert(alert=alert, user=admin_user)

    response = api.post(f"/runs/{run.pk}/finish", {"status": "failed", "outcome": "x"})

    refused_for(response, run, alert)


def test_the_agent_cannot_retry_a_run_with_an_open_alert(api, run, alert):
    refused_for(retry(api, run), run, alert)
    assert not Run.objects.filter(retry_of=run).exists()


def test_an_admin_cancels_it_and_a_retry_waits_for_the_resolution(api, run, alert, admin_user):
    client = Client()
    client.force_login(admin_user)

    response = client.post(f"/runs/{run.pk}/cancel/", {"reason": "the remote needs a person"})

    assert response.status_code == 302
    run.refresh_from_db()
    assert run.status == "cancelled"
    refused_for(retry(api, run), run, alert)

    resolve_alert(alert=alert, user=admin_user, note="Reset the remote by hand.")

    assert retry(api, run).status_code == 201


# --- the agent's other runs -----------------------------------------------------------------


@pytest.fixture
def second(project, owner) -> Api:
    """Another agent of the same project, with its own token."""
    return Api(issued(project, "second-agent", owner).plain)


def test_with_the_setting_the_agents_other_runs_pause(
    api, second, run, reviewer, admin_user, project
):
    other, theirs = open_run(api, "Tag the release"), open_run(second, "Write the changelog")
    claimable = [approved(api, other, reviewer, f"tag-{n}") for n in (1, 2)]
    alert = halted(api, run, reviewer)

    # By default an alert halts its own run only.
    assert api.propose(other.pk, agent_proposal("tag-3")).status_code == 201
    assert claim(api, claimable[0]).status_code == 200

    project.alerts_pause_agent = True
    project.save()

    for response in (api.propose(other.pk, agent_proposal("tag-4")), claim(api, claimable[1])):
        body = problem(response, 409)
        assert body["error"] == "run_not_accepting"
        assert body["detail"] == (
            f"run {other.pk} is paused: run {run.pk} of the same agent has an open alert "
            f"({alert.pk}); a person must resolve it first"
        )
    assert Operation.objects.get(pk=claimable[1].pk).status == "approved"
    # Another agent of the project goes on.
    assert second.propose(theirs.pk, agent_proposal("log-1")).status_code == 201
    assert claim(second, approved(second, theirs, reviewer, "log-2")).status_code == 200

    resolve_alert(alert=alert, user=admin_user, note="Reset the remote by hand.")

    assert api.propose(other.pk, agent_proposal("tag-4")).status_code == 201
    assert claim(api, claimable[1]).status_code == 200


def test_admins_set_it_per_project(project, client):
    admin = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(admin)

    changelist = client.get("/admin/runs/project/").text
    form = client.get(f"/admin/runs/project/{project.pk}/change/").text

    assert "Alerts pause agent" in changelist
    assert 'name="alerts_pause_agent"' in form
