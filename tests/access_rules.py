"""Who gets what from every page and API endpoint: the expected table of the access matrix.

``tests/test_access_matrix.py`` lists the URLs from the URL configuration and the API
endpoints from the OpenAPI document, fills their parameters with objects of project A
(opened by agent A1's token), asks each of ``CALLERS``, and compares the answers with
this table. A URL or endpoint missing here fails the test: add its rule below.

Rules are built from the caller's relation to project A, not written cell by cell.
On pages, an agent's token counts for nothing (it is the same as no one signed in); on
the API, a person's session counts for nothing (401). The POST forms sent are ones the
view refuses after its access check (empty, or acting on something already settled),
so a 400 (form errors) or a 302 with an error message means "got past the access
check", and no POST of the matrix may change anything.
"""

import re
from dataclasses import dataclass, field

from tests.api_helpers import artifact_body

# --- callers ------------------------------------------------------------------------------

ANONYMOUS = "anonymous"
OUTSIDER = "outsider"  # signed in, a member of no project
A_REVIEWER, A_AUDITOR, A_ADMIN = "a_reviewer", "a_auditor", "a_admin"
B_REVIEWER, B_AUDITOR, B_ADMIN = "b_reviewer", "b_auditor", "b_admin"
STAFF = "staff"  # Django staff (a superuser), a member of no project
TOKEN_A1 = "token_a1"  # the token that opened the session of A's objects
TOKEN_A2 = "token_a2"  # another token of project A, with its own session and runs
TOKEN_B = "token_b"
TOKEN_REVOKED = "token_revoked"  # a token of A, revoked after it opened a session
# A token of A that A's admin issued to act for A's reviewer, who has not accepted it.
TOKEN_WAITING = "token_waiting"

PEOPLE = (OUTSIDER, A_REVIEWER, A_AUDITOR, A_ADMIN, B_REVIEWER, B_AUDITOR, B_ADMIN, STAFF)
TOKENS = (TOKEN_A1, TOKEN_A2, TOKEN_B, TOKEN_REVOKED, TOKEN_WAITING)
CALLERS = (ANONYMOUS, *PEOPLE, *TOKENS)
# Who may see project A's data on a 200: its members, its own agent, and Django staff
# (in the admin). Anyone else finding A's marker in an answer is a leak.
SEES_A = {A_REVIEWER, A_AUDITOR, A_ADMIN, TOKEN_A1, STAFF}

# Pages another service calls, signed by it instead of a session and a CSRF token.
SIGNED_CALLBACKS = {"slack/interactivity"}

# --- expected answers ---------------------------------------------------------------------

LOGIN = "302 to sign-in"
ADMIN_LOGIN = "302 to admin sign-in"
type Expect = int | str  # a status code (302: a redirect elsewhere than a sign-in), or above
type Rule = dict[str, Expect]  # caller → expected answer


def page_rule(people: Expect, anonymous: Expect = LOGIN, **callers: Expect) -> Rule:
    """A page: ``people`` for everyone signed in, ``anonymous`` for no one signed in and
    for every agent token, then ``callers`` overriding single callers."""
    rule = {caller: people for caller in PEOPLE}
    rule.update({caller: anonymous for caller in (ANONYMOUS, *TOKENS)})
    return {**rule, **callers}


def in_a(reviewer: Expect, auditor: Expect, admin: Expect) -> Rule:
    """An object page of project A: anyone else signed in finds nothing there (404)."""
    return page_rule(404, **{A_REVIEWER: reviewer, A_AUDITOR: auditor, A_ADMIN: admin})


def staff_only(staff: Expect, anonymous: Expect = ADMIN_LOGIN) -> Rule:
    """The admin: Django staff only; everyone else is sent to the admin's sign-in."""
    return page_rule(ADMIN_LOGIN, anonymous=anonymous, **{STAFF: staff})


def model_admin(staff: Expect) -> Rule:
    """A model's admin page. Unlike the admin site's own pages it is not exempt from
    the sign-in requirement: no one signed in is sent to the site's sign-in first."""
    return staff_only(staff, anonymous=LOGIN)


def api_rule(**tokens: Expect) -> Rule:
    """An endpoint: 401 for no token, a revoked one, one that waits for its owner's
    acceptance, and people's sessions."""
    return {**dict.fromkeys(CALLERS, 401), **tokens}


def own(ok: Expect) -> Rule:
    """Only the token that opened the session reaches its runs and operations; another
    token, of this project (#11, hole 3) or another, finds nothing (404)."""
    return api_rule(**{TOKEN_A1: ok, TOKEN_A2: 404, TOKEN_B: 404})


def any_token(ok: Expect) -> Rule:
    return api_rule(**{TOKEN_A1: ok, TOKEN_A2: ok, TOKEN_B: ok})


PUBLIC = page_rule(200, anonymous=200)
SIGNED_IN = page_rule(200)
READ = in_a(200, 200, 200)
WRONG_METHOD = page_rule(405)  # a POST-only view asked with GET
MANAGE = in_a(403, 403, 200)


# --- pages ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    """``get`` and, for a view that takes POST, ``post`` (sent with ``data`` and a valid
    CSRF token). ``params`` names the object of project A each URL parameter takes
    (keys of the test's dataset)."""

    get: Rule
    post: Rule | None = None
    params: dict[str, str] = field(default_factory=dict)
    data: dict[str, str] = field(default_factory=dict)


RUN = {"pk": "run"}
OPERATION = {"pk": "operation"}
ALERT = {"pk": "alert"}
REQUEST = {"pk": "request"}  # A human request of A1's run, already answered.

PAGES: dict[str, Page] = {
    "": Page(SIGNED_IN),
    # Public, the same answer for everyone: 503 here, the dataset has no worker alive.
    "healthz": Page(page_rule(503, anonymous=503)),
    # Prometheus' page: only its own bearer token opens it (set for the matrix); a
    # person's session or an agent's token is no one there.
    "metrics": Page(page_rule(401, anonymous=401)),
    "account/": Page(SIGNED_IN, post=page_rule(400)),
    # A token waiting for A's reviewer: only they answer it (no answer given: 400); its
    # issuer, A's admin, finds nothing there, as everyone else.
    "account/tokens/<int:pk>/": Page(
        page_rule(404, **{A_REVIEWER: 200}),
        post=page_rule(404, **{A_REVIEWER: 400}),
        params={"pk": "waiting_token"},
    ),
    # The queue of the projects where one is a reviewer: only B's for B's reviewer.
    "approvals/": Page(page_rule(403, **{A_REVIEWER: 200, B_REVIEWER: 200})),
    "operations/<int:pk>/": Page(READ, params=OPERATION),
    "operations/<int:pk>/decide/": Page(
        WRONG_METHOD, post=in_a(400, 403, 403), params=OPERATION, data={"kind": "approve"}
    ),
    # An edit's preview records nothing, but only those who decide may ask for it; an
    # empty form is refused (400) once the decide permission let it through.
    "operations/<int:pk>/edit/": Page(WRONG_METHOD, post=in_a(400, 403, 403), params=OPERATION),
    "operations/<int:pk>/outcome/": Page(READ, params=OPERATION),
    # A's operation is proposed: its admin is told it cannot be requeued (200), and a
    # requeue without a reason is refused (400).
    "operations/<int:pk>/requeue/": Page(MANAGE, post=in_a(403, 403, 400), params=OPERATION),
    "requests/<int:pk>/": Page(READ, params=REQUEST),
    # No version: the form is refused (400) once the decide permission let it through.
    "requests/<int:pk>/answer/": Page(
        WRONG_METHOD, post=in_a(400, 403, 403), params=REQUEST, data={"kind": "approve"}
    ),
    "runs/": Page(SIGNED_IN),
    "runs/<int:pk>/": Page(READ, params=RUN),
    "runs/<int:pk>/cancel/": Page(MANAGE, post=in_a(403, 403, 400), params=RUN),
    "runs/<int:pk>/artifacts/<int:ref>/": Page(READ, params={"pk": "run", "ref": "artifact_ref"}),
    "audit/": Page(SIGNED_IN),
    "audit/export.csv": Page(SIGNED_IN),
    "audit/export.jsonl": Page(SIGNED_IN),
    "audit/checkpoints/<int:pk>/": Page(READ, params={"pk": "checkpoint"}),
    "audit/runs/<int:pk>/": Page(READ, params=RUN),
    "audit/runs/<int:pk>/verify/": Page(READ, params=RUN),
    "audit/runs/<int:pk>/evidence.zip": Page(READ, params=RUN),
    "audit/artifacts/<int:pk>/": Page(READ, params={"pk": "artifact_ref"}),
    "alerts/": Page(SIGNED_IN),
    # The alert is already acknowledged: acknowledging again is refused with a message.
    "alerts/<int:pk>/acknowledge/": Page(WRONG_METHOD, post=in_a(403, 403, 302), params=ALERT),
    # No note: refused with a message.
    "alerts/<int:pk>/resolve/": Page(WRONG_METHOD, post=in_a(403, 403, 302), params=ALERT),
    # Sent again, or nothing left to send: either way back to the alerts page.
    "alerts/<int:pk>/send-again/": Page(WRONG_METHOD, post=in_a(403, 403, 302), params=ALERT),
    "projects/<slug:slug>/tokens/": Page(
        MANAGE, post=in_a(403, 403, 400), params={"slug": "project"}
    ),
    "projects/<slug:slug>/numbers/": Page(MANAGE, params={"slug": "project"}),
    # The token is already revoked: revoking it again changes nothing.
    "projects/<slug:slug>/tokens/<int:pk>/revoke/": Page(
        WRONG_METHOD,
        post=in_a(403, 403, 302),
        params={"slug": "project", "pk": "revoked_token"},
    ),
    # A project's webhooks: its admins only. A new endpoint without its fields is
    # refused (400); the state without "on" or "off", a new secret for another name
    # and sending again a delivery that did not fail are refused with a message.
    "projects/<slug:slug>/webhooks/": Page(
        MANAGE, post=in_a(403, 403, 400), params={"slug": "project"}
    ),
    "projects/<slug:slug>/webhooks/<int:pk>/state/": Page(
        WRONG_METHOD, post=in_a(403, 403, 302), params={"slug": "project", "pk": "webhook"}
    ),
    "projects/<slug:slug>/webhooks/<int:pk>/secret/": Page(
        WRONG_METHOD, post=in_a(403, 403, 302), params={"slug": "project", "pk": "webhook"}
    ),
    "projects/<slug:slug>/webhooks/deliveries/<int:pk>/send-again/": Page(
        WRONG_METHOD,
        post=in_a(403, 403, 302),
        params={"slug": "project", "pk": "webhook_delivery"},
    ),
    # One's own Slack user: without Slack set up (as here) there is no code to get
    # (404); unlinking, with nothing linked, changes nothing.
    "account/slack/code/": Page(WRONG_METHOD, post=page_rule(404)),
    "account/slack/unlink/": Page(WRONG_METHOD, post=page_rule(302)),
    # Slack's callback: no session, no CSRF token, Slack's signature instead; without
    # Slack set up (as here) there is none (404) for anyone.
    "slack/interactivity": Page(page_rule(405, anonymous=405), post=page_rule(404, anonymous=404)),
    # Django's sign-in pages (empty forms: answered with their errors).
    "accounts/login/": Page(PUBLIC, post=PUBLIC),
    "accounts/logout/": Page(page_rule(405), post=page_rule(LOGIN)),
    "accounts/password_change/": Page(SIGNED_IN, post=SIGNED_IN),
    # Single sign-on's start and return: not there while it is off (as here).
    "accounts/sso/start/": Page(page_rule(404, anonymous=404), post=page_rule(405, anonymous=405)),
    "accounts/sso/callback/": Page(
        page_rule(404, anonymous=404), post=page_rule(405, anonymous=405)
    ),
    "accounts/password_change/done/": Page(SIGNED_IN),
    # The API's own pages: its documentation is public, its root is nothing; the
    # endpoints are below.
    "api/v1/openapi.json": Page(PUBLIC),
    "api/v1/docs": Page(PUBLIC),
    "api/v1/": Page(page_rule(404, anonymous=404)),
    # The Django admin: staff only (project roles give nothing there).
    "admin/": Page(staff_only(200)),
    "admin/login/": Page(page_rule(200, anonymous=200, **{STAFF: 302}), post=PUBLIC),
    # Signed in but not staff: sent to the admin's index (and from there to its sign-in).
    "admin/logout/": Page(
        page_rule(302, anonymous=ADMIN_LOGIN, **{STAFF: 405}),
        post=page_rule(302, anonymous=ADMIN_LOGIN, **{STAFF: LOGIN}),
    ),
    "admin/password_change/": Page(staff_only(200), post=staff_only(200)),
    "admin/password_change/done/": Page(staff_only(200)),
    "admin/autocomplete/": Page(staff_only(403)),
    "admin/jsi18n/": Page(staff_only(200)),
    "admin/r/<path:content_type_id>/<path:object_id>/": Page(
        staff_only(404), params={"content_type_id": "run_type", "object_id": "run"}
    ),
    "admin/^(?P<app_label>...)/$": Page(staff_only(200), params={"app_label": "app"}),
    "admin/(?P<url>.*)$": Page(staff_only(404), params={"url": "unknown_admin_page"}),
    "admin/auth/user/<id>/password/": Page(model_admin(200), params={"id": "user"}),
}

# Every model registered in the admin has these pages; ``<app>/<model>`` stands for it.
MODEL = {"object_id": "admin_object"}
ADMIN_MODEL_PAGES: dict[str, Page] = {
    "admin/<app>/<model>/": Page(model_admin(200)),
    "admin/<app>/<model>/add/": Page(model_admin(200)),
    "admin/<app>/<model>/<path:object_id>/history/": Page(model_admin(200), params=MODEL),
    "admin/<app>/<model>/<path:object_id>/delete/": Page(model_admin(200), params=MODEL),
    "admin/<app>/<model>/<path:object_id>/change/": Page(model_admin(200), params=MODEL),
    "admin/<app>/<model>/<path:object_id>/": Page(model_admin(302), params=MODEL),
}
# What staff may not do in the admin: add or delete history and state-machine rows
# (they change through the services only), or add the sign-in throttle's records.
ADMIN_REFUSED = {
    **dict.fromkeys(
        [
            "runs.session",
            "runs.run",
            "runs.message",
            "runs.operation",
            "runs.decision",
            "runs.checkpoint",
            "runs.admincheckpoint",
            "runs.checkpointartifact",
            "runs.artifact",
            "runs.alert",
            "runs.alertdelivery",
        ],
        frozenset({"add", "delete"}),
    ),
    **dict.fromkeys(
        [
            "axes.accessattempt",
            "axes.accesslog",
            "axes.accessfailurelog",
            # Made by a person's first single sign-on only.
            "runs.provideridentity",
        ],
        frozenset({"add"}),
    ),
}
_ADMIN_MODEL_ROUTE = re.compile(r"admin/(\w+)/(\w+)/(.*)")
# The admin's app index lists the apps in its pattern: "(?P<app_label>auth|axes|runs)".
_APP_LABELS = re.compile(r"\(\?P<app_label>[^)]*\)")


def table_key(route: str) -> str:
    return _APP_LABELS.sub("(?P<app_label>...)", route)


def page_for(route: str, admin_models: set[str]) -> tuple[Page | None, str | None]:
    """The rule of ``route`` and, for a model's admin page, the model's label
    ("runs.run"); ``admin_models`` are the labels registered in the admin."""
    key = table_key(route)
    if key in PAGES:
        return PAGES[key], None
    match = _ADMIN_MODEL_ROUTE.fullmatch(route)
    label = f"{match[1]}.{match[2]}" if match else None
    if label not in admin_models:
        return None, None
    key = f"admin/<app>/<model>/{match[3]}"
    page = ADMIN_MODEL_PAGES.get(key)
    if page and key.removesuffix("/").rsplit("/", 1)[-1] in ADMIN_REFUSED.get(label, ()):
        page = Page(model_admin(403), params=page.params)
    return page, label


# --- API endpoints ------------------------------------------------------------------------


@dataclass(frozen=True)
class Ref:
    """An object of the dataset inside a request body."""

    name: str


@dataclass(frozen=True)
class Endpoint:
    """A valid request to an endpoint (``body`` for a POST). The bodies that would move
    A's run or operation are refused after the access check (409: a stale
    ``base_version``, an operation not approved, an epoch that holds nothing), so the
    token that may use them gets a 409 and changes nothing."""

    rule: Rule
    params: dict[str, str] = field(default_factory=dict)
    body: dict | None = None


EPOCH = {"epoch": 7}

ENDPOINTS: dict[str, Endpoint] = {
    "POST /api/v1/sessions": Endpoint(any_token(201), body={"title": "matrix"}),
    "POST /api/v1/runs": Endpoint(own(201), body={"session": Ref("session"), "goal": "Retry"}),
    "GET /api/v1/runs/{pk}": Endpoint(own(200), RUN),
    "POST /api/v1/runs/{pk}/finish": Endpoint(
        own(409), RUN, {"status": "completed", "base_version": 1}
    ),
    "POST /api/v1/runs/{pk}/messages": Endpoint(own(201), RUN, {"payload": {"text": "hi"}}),
    "GET /api/v1/runs/{pk}/checkpoints": Endpoint(own(200), RUN),
    "POST /api/v1/runs/{pk}/operations": Endpoint(
        own(409),
        RUN,
        {
            "call_id": "matrix",
            "action": "git.push",
            "arguments": {"remote": "origin"},
            "rollback_kind": "none",
            "base_version": 1,
        },
    ),
    "GET /api/v1/operations/{pk}": Endpoint(own(200), OPERATION),
    "POST /api/v1/operations/{pk}/claim": Endpoint(own(409), OPERATION, {}),
    "POST /api/v1/operations/{pk}/heartbeat": Endpoint(
        own(409), OPERATION, {**EPOCH, "lease_seconds": 60}
    ),
    "POST /api/v1/operations/{pk}/intent": Endpoint(own(409), OPERATION, EPOCH),
    "POST /api/v1/operations/{pk}/report": Endpoint(
        own(409), OPERATION, {**EPOCH, "effect": "applied"}
    ),
    "POST /api/v1/operations/{pk}/rollback": Endpoint(
        own(409), OPERATION, {**EPOCH, "outcome": "compensated"}
    ),
    "POST /api/v1/runs/{pk}/artifacts": Endpoint(own(201), RUN, artifact_body(b"matrix")),
    "GET /api/v1/artifacts/{sha256}": Endpoint(own(200), {"sha256": "artifact_sha"}),
    # Lookups by external id need their filter: 422 for every token (identity tests).
    "GET /api/v1/sessions": Endpoint(any_token(422)),
    "GET /api/v1/runs": Endpoint(any_token(422)),
    "GET /api/v1/operations": Endpoint(any_token(422)),
    "GET /api/v1/runs/{pk}/messages": Endpoint(own(200), RUN),
    "POST /api/v1/operations/{pk}/withdraw": Endpoint(own(200), OPERATION, {}),
    # Each token's own events; the same catalogue for all.
    "GET /api/v1/events": Endpoint(any_token(200)),
    "GET /api/v1/actions": Endpoint(any_token(200)),
    # The name of A1's request, for another question: refused (409) after the access check.
    "POST /api/v1/runs/{pk}/requests": Endpoint(
        own(409), RUN, {"prompt": "Again?", "external_id": "matrix-request"}
    ),
    # A lookup needs its filter: 422 for every token, and nothing of A's shown.
    "GET /api/v1/requests": Endpoint(any_token(422)),
    "GET /api/v1/requests/{pk}": Endpoint(own(200), REQUEST),
    # Already answered: withdrawing it is refused.
    "POST /api/v1/requests/{pk}/withdraw": Endpoint(own(409), REQUEST, {}),
}
