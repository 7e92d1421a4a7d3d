"""The access matrix: every URL of the URL configuration and every endpoint of the OpenAPI
document, asked by every kind of caller, answers as ``tests/access_rules.py`` says.

One dataset serves the whole module, built once inside a transaction that is rolled
back at the end (each test runs in a savepoint of it): project A with a run, an
operation, a checkpoint, an artifact and an alert, opened through the API by agent A1's
token; a second agent of A (A2) with its own session; project B with its agent; a
revoked token of A, and one its admin issued for its reviewer, who has not accepted it.
Each URL's parameters are filled with A's objects.
"""

import re
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any

import pytest
from axes.models import AccessFailureLog, AccessLog
from django.conf import settings
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.db import transaction
from django.shortcuts import resolve_url
from django.test import Client, override_settings
from django.urls import URLResolver, get_resolver, resolve, reverse

from runs.actors import Actor
from runs.api.api import api
from runs.engine.deliveries import deliver_due
from runs.models import (
    AgentToken,
    Alert,
    ApprovalPolicy,
    CheckpointArtifact,
    HumanRequest,
    Membership,
    Operation,
    Project,
    ProviderIdentity,
    Role,
    Run,
    Session,
    WebhookDelivery,
)
from runs.services import requests as human_requests
from runs.services.admin_record import record_admin_act
from runs.services.alerts import acknowledge_alert
from tests import access_rules as rules
from tests.api_helpers import Api, agent_proposal, artifact_body
from tests.conftest import issued, make_user
from tests.helpers import decide_on, stored
from tests.webhook_receivers import endpoint_with_delivery

# In A1's goal, arguments, messages and artifact: no answer to anyone outside A may show it.
MARKER = "alpha-secret-7f3c"
CSRF_SECRET = "m" * 32  # A CSRF cookie; the same value in X-CSRFToken passes the check.
METRICS_TOKEN = "p" * 40  # Set, so that /metrics exists; no caller of the matrix sends it.

ADMIN_MODELS = {model._meta.label_lower for model in admin.site._registry}
API_ROOT = reverse("api:api-root").lstrip("/")


# --- what the URL configuration and the OpenAPI document offer ------------------------


def _routes(resolver: URLResolver, prefix: str = ""):
    """Every URL pattern's route, includes joined ("runs/<int:pk>/")."""
    for pattern in resolver.url_patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            yield from _routes(pattern, route)
        else:
            yield route


def _openapi_path(route: str) -> str:
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route)


ENDPOINTS = [
    f"{method.upper()} {path}"
    for path, methods in api.get_openapi_schema()["paths"].items()
    for method in methods
]
_ENDPOINT_PATHS = {endpoint.split(" ", 1)[1] for endpoint in ENDPOINTS}
# The pages: every route but the API's endpoints (the API's documentation is a page).
PAGES = [route for route in _routes(get_resolver()) if _openapi_path(route) not in _ENDPOINT_PATHS]


def test_every_url_and_endpoint_has_an_access_rule():
    missing = [route for route in PAGES if rules.page_for(route, ADMIN_MODELS)[0] is None]
    missing += [endpoint for endpoint in ENDPOINTS if endpoint not in rules.ENDPOINTS]
    assert not missing, f"add their access rules to tests/access_rules.py: {missing}"
    keys = {rules.table_key(route) for route in PAGES}
    stale = [route for route in rules.PAGES if route not in keys]
    stale += [endpoint for endpoint in rules.ENDPOINTS if endpoint not in ENDPOINTS]
    assert not stale, f"rules for URLs that no longer exist, in tests/access_rules.py: {stale}"


# --- the dataset ----------------------------------------------------------------------


@dataclass
class World:
    logins: dict[str, str]  # caller → session key
    tokens: dict[str, str]  # caller → plain token
    objects: dict[str, Any]  # what a URL parameter takes, by the names in access_rules
    client: Client


def created(response) -> dict:
    assert response.status_code in (200, 201), response.content
    return response.json()


def _people(a: Project, b: Project) -> dict[str, Any]:
    roles = {
        rules.A_REVIEWER: (a, Role.REVIEWER),
        rules.A_AUDITOR: (a, Role.AUDITOR),
        rules.A_ADMIN: (a, Role.ADMIN),
        rules.B_REVIEWER: (b, Role.REVIEWER),
        rules.B_AUDITOR: (b, Role.AUDITOR),
        rules.B_ADMIN: (b, Role.ADMIN),
    }
    people = {caller: make_user(caller, project, role) for caller, (project, role) in roles.items()}
    people[rules.OUTSIDER] = make_user(rules.OUTSIDER)
    people[rules.STAFF] = get_user_model().objects.create_superuser(
        rules.STAFF, "staff@example.com", "pw"
    )
    return people


def _session_key(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


def _agent_work(api: Api, goal: str, call_id: str) -> tuple[int, int, int]:
    """An agent's session, and a run with a message and a proposal: their ids."""
    session = created(api.post("/sessions", {"title": goal}))["id"]
    run = created(api.post("/runs", {"session": session, "goal": goal}))["id"]
    created(api.post(f"/runs/{run}/messages", {"payload": {"text": f"Working on: {goal}"}}))
    arguments = {"remote": "origin", "branch": goal.replace(" ", "-")}
    operation = created(api.propose(run, agent_proposal(call_id, arguments=arguments)))["id"]
    return session, run, operation


def _alert(api: Api, operation: int, admin_user) -> Alert:
    """The agent could not verify the effect of an approved operation: an alert, which
    reached the project's admin by email (nothing to send again), and was acknowledged."""
    epoch = created(api.post(f"/operations/{operation}/claim", {}))["epoch"]
    created(api.post(f"/operations/{operation}/intent", {"epoch": epoch}))
    created(api.post(f"/operations/{operation}/report", {"epoch": epoch, "effect": "uncertain"}))
    body = {"epoch": epoch, "outcome": "alert", "detail": "push not verified"}
    created(api.post(f"/operations/{operation}/rollback", body))
    deliver_due()
    return acknowledge_alert(alert=Alert.objects.get(operation=operation), user=admin_user)


def _admin_rows() -> None:
    """Rows for the admin pages of the sign-in throttle (django-axes): a failed sign-in,
    and the logs it does not keep here (AXES_DISABLE_ACCESS_LOG, no failure log) but
    whose admin pages exist. The name signs in nowhere: a success forgives failures."""
    Client().post(reverse("login"), {"username": "nobody", "password": "wrong"})
    AccessLog.objects.create(username="nobody", ip_address="127.0.0.1")
    AccessFailureLog.objects.create(username="nobody", ip_address="127.0.0.1")


def _answered_request(api: Api, run: int, reviewer) -> int:
    """A1 asks for a sign-off on its run; A's reviewer gives it."""
    body = {"prompt": f"Ship {MARKER}?", "external_id": "matrix-request"}
    pk = created(api.post(f"/runs/{run}/requests", body))["id"]
    request = HumanRequest.objects.get(pk=pk)
    human_requests.answer(
        request=request, reviewer=reviewer, kind="approve", version=request.version
    )
    return pk


def _waiting(project: Project, owner, issuer) -> AgentToken:
    """A token ``issuer`` issued to act for ``owner``, who has not accepted it."""
    token, plain = AgentToken.issue(
        project=project, name="agent-a-waiting", owner=owner, issued_by=issuer
    )
    token.plain = plain
    return token


def build_world() -> World:
    a = Project.objects.create(slug="alpha", name="Alpha")
    b = Project.objects.create(slug="beta", name="Beta")
    people = _people(a, b)
    a_admin, b_admin = people[rules.A_ADMIN], people[rules.B_ADMIN]
    tokens = {
        rules.TOKEN_A1: issued(a, "agent-a1", a_admin),
        rules.TOKEN_A2: issued(a, "agent-a2", a_admin),
        rules.TOKEN_B: issued(b, "agent-b", b_admin),
        rules.TOKEN_REVOKED: issued(a, "agent-a-old", a_admin),
        rules.TOKEN_WAITING: _waiting(a, people[rules.A_REVIEWER], a_admin),
    }
    a1, a2 = Api(tokens[rules.TOKEN_A1].plain), Api(tokens[rules.TOKEN_A2].plain)
    session, run, operation = _agent_work(a1, f"Deploy {MARKER}", "push-1")
    sha = created(a1.post(f"/runs/{run}/artifacts", artifact_body(MARKER.encode())))["sha256"]
    request = _answered_request(a1, run, people[rules.A_REVIEWER])
    _, _, a2_operation = _agent_work(a2, "Tidy the docs", "push-2")
    decide_on(Operation.objects.get(pk=a2_operation), people[rules.A_REVIEWER])
    alert = _alert(a2, a2_operation, a_admin)
    _agent_work(Api(tokens[rules.TOKEN_B].plain), "Work of project B", "push-b")
    created(Api(tokens[rules.TOKEN_REVOKED].plain).post("/sessions", {"title": "old agent"}))
    tokens[rules.TOKEN_REVOKED].revoke()
    ApprovalPolicy.objects.create(project=a, action="ledger.transfer", approvals_required=2)
    _admin_rows()
    ProviderIdentity.objects.create(
        user=people[rules.A_REVIEWER], issuer="https://id.example.com", subject="a-reviewer"
    )
    record_admin_act("config.applied", Actor.of_user(a_admin), project=a, detail={})
    hook, delivery = endpoint_with_delivery(a, WebhookDelivery.Status.DELIVERED)
    reference = CheckpointArtifact.objects.get(checkpoint__run=run)
    objects = {
        "project": a.slug,
        "session": session,
        "run": run,
        "operation": operation,
        "checkpoint": reference.checkpoint_id,
        "artifact_ref": reference.pk,
        "artifact_sha": sha,
        "alert": alert.pk,
        "request": request,
        "revoked_token": tokens[rules.TOKEN_REVOKED].pk,
        "waiting_token": tokens[rules.TOKEN_WAITING].pk,
        "webhook": hook.pk,
        "webhook_delivery": delivery.pk,
        "user": people[rules.A_REVIEWER].pk,
        "run_type": ContentType.objects.get_for_model(Run).pk,
        "app": "runs",
        "unknown_admin_page": "no-such-page/",
    }
    return World(
        logins={caller: _session_key(user) for caller, user in people.items()},
        tokens={caller: token.plain for caller, token in tokens.items()},
        objects=objects,
        client=Client(enforce_csrf_checks=True),
    )


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker, tmp_path_factory):
    """Built once; each test's own transaction is a savepoint inside this one."""
    storage = tmp_path_factory.mktemp("access-matrix")
    with (
        django_db_blocker.unblock(),
        override_settings(
            OVERSIGHT_WORKSPACE=storage / "workspace",
            OVERSIGHT_ARTIFACT_ROOT=storage / "artifacts",
            OVERSIGHT_METRICS_TOKEN=METRICS_TOKEN,
        ),
        transaction.atomic(),
    ):
        yield build_world()
        transaction.set_rollback(True)


@pytest.fixture(autouse=True)
def private_storage():
    """The dataset's artifacts stay where ``world`` stored them (replaces conftest's)."""


# --- asking ---------------------------------------------------------------------------


def snapshot() -> tuple:
    """Everything a refused or settled request must leave as it was."""
    return (
        stored(),
        list(Alert.objects.order_by("pk").values_list("pk", "status")),
        list(AgentToken.objects.order_by("pk").values_list("pk", "accepted_at", "revoked_at")),
        Session.objects.count(),
        Membership.objects.count(),
        CheckpointArtifact.objects.count(),
        list(get_user_model().objects.order_by("pk").values_list("pk", "password")),
    )


def ask(world: World, caller: str, method: str, path: str, *, body=None, data=None, csrf=True):
    """One request as ``caller``: signed in (a person) or with its bearer token (an
    agent), with a valid CSRF token unless ``csrf`` is false. Returns the response and
    its content."""
    client = world.client
    client.cookies = SimpleCookie()
    headers = {}
    if caller in world.logins:
        client.cookies[settings.SESSION_COOKIE_NAME] = world.logins[caller]
    if caller in world.tokens:
        headers["Authorization"] = f"Bearer {world.tokens[caller]}"
    if csrf:
        client.cookies[settings.CSRF_COOKIE_NAME] = CSRF_SECRET
        headers["X-CSRFToken"] = CSRF_SECRET
    if method == "GET":
        response = client.get(path, headers=headers)
    elif body is not None:
        response = client.post(path, body, content_type="application/json", headers=headers)
    else:
        response = client.post(path, data or {}, headers=headers)
    # Read to the end: the test client closes a streamed answer (its file) after it.
    content = b"".join(response.streaming_content) if response.streaming else response.content
    return response, content


def answer(response) -> rules.Expect:
    if response.status_code == 302:
        location = response["Location"]
        if location.startswith(reverse("admin:login")):
            return rules.ADMIN_LOGIN
        if location.startswith(resolve_url(settings.LOGIN_URL)):
            return rules.LOGIN
    return response.status_code


def check(world: World, rule: rules.Rule, method: str, path: str, **request) -> list[str]:
    """Ask every caller: the answers that differ from ``rule``, and leaks of A's data to
    callers outside A. No refused request (4xx), and no POST to a page, may change
    anything."""
    problems = []
    for caller in rules.CALLERS:
        before = snapshot() if method == "POST" else None
        response, content = ask(world, caller, method, path, **request)
        got, expected = answer(response), rule[caller]
        if got != expected:
            where = f" to {response['Location']}" if got == 302 else ""
            problems.append(f"{caller}: {got}{where} (expected {expected})")
        if got in (200, 201) and caller not in rules.SEES_A and MARKER.encode() in content:
            problems.append(f"{caller}: {got} shows project A's data")
        settled = request.get("body") is None or response.status_code >= 400
        if before is not None and settled and snapshot() != before:
            problems.append(f"{caller}: {got}, and the POST changed something")
    return [f"{method} {path} {problem}" for problem in problems]


def fill(template: str, params: dict[str, str], world: World, model: str | None) -> str:
    """``template`` (a route, or an OpenAPI path) with its parameters replaced by A's
    objects: ``<int:pk>``, ``(?P<pk>…)`` and ``{pk}`` alike."""

    def value(match: re.Match) -> str:
        kind = params[next(group for group in match.groups() if group)]
        if kind == "admin_object":
            row = _admin_model(model)._default_manager.order_by("pk").first()
            assert row is not None, f"the dataset has no {model}: add one to build_world()"
            return str(row.pk)
        return str(world.objects[kind])

    path = re.sub(r"<(?:\w+:)?(\w+)>|\(\?P<(\w+)>[^)]*\)|\{(\w+)\}", value, template)
    return "/" + path.replace("^", "").replace("$", "").removeprefix("/")


def _admin_model(label: str):
    return next(model for model in admin.site._registry if model._meta.label_lower == label)


def _filled(body, world: World):
    """``body`` with each ``Ref`` replaced by its object of the dataset."""
    if isinstance(body, rules.Ref):
        return world.objects[body.name]
    if isinstance(body, dict):
        return {key: _filled(value, world) for key, value in body.items()}
    return body


# --- the matrix -----------------------------------------------------------------------


@pytest.mark.parametrize("route", PAGES)
def test_page_access(world, db, route):
    page, model = rules.page_for(route, ADMIN_MODELS)
    assert page is not None, f"{route}: add its access rule to tests/access_rules.py"
    path = fill(route, page.params, world, model)
    assert resolve(path).route == route.replace("^", ""), f"{path} does not reach {route}"
    problems = check(world, page.get, "GET", path)
    if page.post is not None:
        problems += check(world, page.post, "POST", path, data=page.data)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_api_access(world, db, endpoint):
    rule = rules.ENDPOINTS.get(endpoint)
    assert rule is not None, f"{endpoint}: add its access rule to tests/access_rules.py"
    method, template = endpoint.split(" ", 1)
    path = fill(template, rule.params, world, None)
    body = _filled(rule.body, world) if method == "POST" else None
    problems = check(world, rule.rule, method, path, body=body)
    assert not problems, "\n".join(problems)


def test_a_post_without_csrf_token_is_refused_on_every_page(world, db):
    """Whatever its methods, every page refuses a POST that a signed-in person's browser
        sent without the CSRF token (a forged cross-site form), and nothing changes. The API
        is not in it: it takes no cookie, only a bearer token; nor are the callbacks that
    other services sign (tests/test_slack.py refuses the unsigned ones)."""
    accepted = []
    for route in PAGES:
        page, model = rules.page_for(route, ADMIN_MODELS)
        if route.startswith(API_ROOT) or page is None:  # No rule: the test above fails.
            continue
        if route in rules.SIGNED_CALLBACKS:  # No cookie either: the caller's signature.
            continue
        caller = rules.STAFF if route.startswith("admin/") else rules.A_ADMIN
        before = snapshot()
        path = fill(route, page.params, world, model)
        response, content = ask(world, caller, "POST", path, data=page.data, csrf=False)
        if response.status_code != 403 or b"CSRF verification failed" not in content:
            accepted.append(f"{path}: {response.status_code}")
        elif snapshot() != before:
            accepted.append(f"{path}: 403, and the POST changed something")
    assert not accepted, f"POSTs without a CSRF token, not refused: {accepted}"
