"""The NinjaAPI instance: authentication, error bodies, and the URLs (exempt from the
pages' login requirement: the API authenticates by token)."""

import sys

from django.contrib.auth.decorators import login_not_required
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from runs.api import catalogue, feed, requests
from runs.api.auth import PayloadTooLarge, TokenAuth, TokenWaits
from runs.api.endpoints import router
from runs.api.limits import Refused, StrictParser
from runs.api.problems import problem_body
from runs.artifact_store import StoreUnavailable
from runs.errors import (
    ArgumentsChanged,
    ConflictingProposal,
    DecisionRefused,
    ExternalIdConflict,
    IllegalTransition,
    InvalidInput,
    NotPermitted,
    OperationExpired,
    OversightError,
    PreviewChanged,
    RunClosed,
    RunNotAccepting,
    StaleVersion,
)


class AgentApi(NinjaAPI):
    """The document also carries each registered action's arguments schema in its
    components (``Arguments.<action>``), referenced from ``ProposalIn.arguments``."""

    def get_openapi_schema(self, **kwargs):
        document = super().get_openapi_schema(**kwargs)
        schemas = document["components"]["schemas"]
        schemas.update(catalogue.openapi_components())
        schemas["ProposalIn"]["properties"]["arguments"].update(catalogue.arguments_choice())
        return document


api = AgentApi(
    title="Oversight agent API",
    version="1",
    description="Propose operations, wait for people's decisions, read results.",
    auth=TokenAuth(),
    urls_namespace="api",
    openapi_url="/openapi.json",
    docs_url="/docs",
    parser=StrictParser(),
)
api.add_router("", router)
api.add_router("", requests.router)
api.add_router("", feed.router)
api.add_router("", catalogue.router)

STATUS = {
    ConflictingProposal: 409,
    StaleVersion: 409,
    RunClosed: 409,
    RunNotAccepting: 409,
    IllegalTransition: 409,
    ArgumentsChanged: 409,
    PreviewChanged: 409,
    DecisionRefused: 409,
    ExternalIdConflict: 409,
    OperationExpired: 409,
    NotPermitted: 403,
    InvalidInput: 422,
}


def problem(request, status: int, error: str, detail: str, field: str | None = None):
    return api.create_response(request, problem_body(error, detail, field), status=status)


@api.exception_handler(OversightError)
def oversight_error(request, exc: OversightError):
    detail = str(exc)
    field = detail.split(":", 1)[0] if isinstance(exc, InvalidInput) and ":" in detail else None
    return problem(request, STATUS.get(type(exc), 409), exc.code, detail, field)


@api.exception_handler(Refused)
def refused(request, exc: Refused):
    """Input refused by a limit or a JSON check (``LimitExceeded`` is one)."""
    return problem(request, exc.status, exc.code, f"{exc.field}: {exc}", exc.field)


@api.exception_handler(PayloadTooLarge)
def payload_too_large(request, exc: PayloadTooLarge):
    return problem(request, 413, "limit_exceeded", str(exc))


def _field(loc) -> str:
    """ninja's error location without its prefix: ("body", "body", "x") → "x"."""
    parts = loc[2:] if loc[:1] == ("body",) else loc[1:]
    return ".".join(str(part) for part in parts) or "body"


@api.exception_handler(ValidationError)
def invalid_request(request, exc: ValidationError):
    fields = [_field(tuple(error.get("loc", ()))) for error in exc.errors]
    detail = "; ".join(f"{f}: {e.get('msg')}" for f, e in zip(fields, exc.errors, strict=True))
    return problem(request, 422, "invalid", detail, fields[0] if fields else None)


@api.exception_handler(HttpError)
def http_error(request, exc: HttpError):
    """ninja's own refusals, e.g. a body that is not JSON. A body the strict parser
    refused carries the parser's reason and field."""
    if isinstance(exc.__cause__, Refused):
        return refused(request, exc.__cause__)
    return problem(request, exc.status_code, "invalid", f"body: {exc}", "body")


@api.exception_handler(AuthenticationError)
def unauthenticated(request, exc):
    return problem(request, 401, "unauthenticated", "a valid agent token is required")


@api.exception_handler(TokenWaits)
def token_waits(request, exc: TokenWaits):
    return problem(request, 401, "unauthenticated", str(exc))


@api.exception_handler(Http404)
def not_found(request, exc):
    return problem(request, 404, "not_found", "no such object in this token's project")


# The database could not serve the request just now: PostgreSQL restarting or failing
# over, the connection dropped or terminated, none free in the pool within
# OVERSIGHT_WEB_DB_WAIT_SECONDS, a lock or a statement timed out (SQLite: locked).
DATABASE_UNAVAILABLE = (OperationalError, InterfaceError)
# Long enough for PostgreSQL to restart or a pool to connect again; the client waits
# it out before it sends the request again.
RETRY_AFTER_SECONDS = 3


def out_of_reach(error: BaseException | None) -> str | None:
    """What Oversight needs and could not reach, if that is why ``error`` was raised:
    the database, or the artifact store (an object store's outage)."""
    if isinstance(error, DATABASE_UNAVAILABLE):
        return "the database"
    if isinstance(error, StoreUnavailable):
        return "the artifact store"
    return None


def server_error(request) -> HttpResponse:
    """The answer to an exception nothing else answered (Django's ``handler500``, under
    /api/), raised by a view, a middleware (``IdempotencyKeyMiddleware`` reads the token
    and the key before the API runs) or the commit: JSON, as every answer of the API,
    never an HTML page. The database or the artifact store out of reach is a 503 with
    Retry-After, not a 500: the request may be sent again (a write's transaction was
    rolled back with its Idempotency-Key, or committed with the answer a retry gets).
    The exception's words go to the server log only."""
    if (what := out_of_reach(sys.exc_info()[1])) is None:
        return problem(request, 500, "server_error", "the server failed; its log says why")
    response = problem(request, 503, "unavailable", f"{what} cannot be reached just now: try again")
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def urls():
    """The API's URL patterns, each exempt from LoginRequiredMiddleware."""
    patterns, app_name, namespace = api.urls
    for pattern in patterns:
        pattern.callback = login_not_required(pattern.callback)
    return patterns, app_name, namespace
