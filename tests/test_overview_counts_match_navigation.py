"""The overview's counts per project add up to the navigation's badges: decisions
waiting (operations and requests) where the user decides, open alerts where they may
see them. A project where they do not decide shows a dash, counted nowhere."""

import re

import pytest

from runs.engine.worker import Worker
from runs.models import Role
from runs.services.requests import ask
from runs.services.runs import open_session, start_run
from tests.conftest import AGENT, issued, make_user


def badge(page: str, name: str) -> int:
    return int(re.search(rf'id="nav-{name}"[^>]*>(\d+)<', page)[1])


def cells(page: str, slug: str) -> tuple[str, str]:
    row = re.search(rf'<tr id="project-{slug}">.*?</tr>', page, re.S)[0]
    pending = re.search(r'<td class="pending">([^<]*)</td>', row)[1]
    return pending, re.search(r'<td class="alerts">([^<]*)</td>', row)[1]


@pytest.fixture
def elsewhere(other_project, reviewer):
    """A project where the reviewer only audits, with an operation and a request
    waiting: not theirs to decide, so neither the overview nor the badge counts them."""
    other_project.memberships.create(
        user=reviewer, role=reviewer.groups.model.objects.get(name=Role.AUDITOR)
    )
    owner = make_user("other-owner", other_project, Role.REVIEWER)
    token = issued(other_project, "other-agent", owner)
    session = open_session(project=other_project, owner=owner, agent="other-agent", token=token)
    run = start_run(session=session, goal="Elsewhere", actor=AGENT)
    ask(run=run, prompt="Elsewhere?", actor=AGENT, token=token)
    return other_project


@pytest.fixture
def waiting(approved, propose, session, agent_token, admin_user, elsewhere):
    """In the reviewer's project: an alert (a verification the target lies about, no
    undo), which halts its run, and in another run two proposals and an open request."""
    approved("http-rigged-no-undo")
    Worker().drain()
    other = start_run(session=session, goal="Another goal", actor=AGENT)
    propose("call-a", target=other)
    propose("call-b", target=other)
    ask(run=other, prompt="May I?", actor=AGENT, token=agent_token)


def test_the_overview_counts_what_the_navigation_counts(client, reviewer, project, waiting):
    client.force_login(reviewer)

    overview = client.get("/").text
    elsewhere_page = client.get("/runs/").text

    assert cells(overview, project.slug) == ("3", "1")
    assert cells(overview, "other") == ("—", "0")
    assert badge(overview, "pending") == badge(elsewhere_page, "pending") == 3
    assert badge(overview, "alerts") == badge(elsewhere_page, "alerts") == 1


def test_an_auditor_sees_no_decision_count_and_the_same_alerts(client, auditor, project, waiting):
    client.force_login(auditor)

    overview = client.get("/").text

    assert cells(overview, project.slug) == ("—", "1")
    assert 'id="nav-pending"' not in overview
    assert badge(overview, "alerts") == badge(client.get("/runs/").text, "alerts") == 1
