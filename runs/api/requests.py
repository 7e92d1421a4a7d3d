"""The agent API's human requests: ask a question, a sign-off, a choice or data that
Oversight does not execute, wait for the answer (long-poll, or the feed), look a request up by the
agent's own name for it, withdraw it. Found only within the token's own sessions, as
every endpoint (``runs.api.endpoints``): another agent's request is a 404."""

from asgiref.sync import sync_to_async
from django.shortcuts import get_object_or_404
from ninja import Router

from runs.api import schemas as s
from runs.api.endpoints import PROBLEMS, agent, created, own_run, token
from runs.api.limits import QueryText, RowId
from runs.api.request_schemas import RequestIn, RequestOut
from runs.api.waits import long_poll
from runs.clock import db_now
from runs.errors import InvalidInput
from runs.models import HumanRequest
from runs.services import requests as service
from runs.services.identity import found_by_name, owned

router = Router()


def own_request(request, pk: int) -> HumanRequest:
    return get_object_or_404(
        HumanRequest.objects.select_related("answered_by"),
        pk=pk,
        run__session__token=token(request),
    )


@router.post(
    "/runs/{int:pk}/requests",
    response={200: RequestOut, 201: RequestOut, **PROBLEMS},
    tags=["requests"],
)
def ask(request, pk: int, body: RequestIn):
    """Ask people a question, a sign-off, a choice or data (``kind``; without it, a
    choice with ``choices``, data with an ``answer_schema``, else a sign-off; a kind its
    fields contradict is a 422): the run waits (needs_input) until the request is
    answered, rejected, expired or withdrawn. A repeat naming an
    ``external_id`` this token gave a request of the same run asking the same thing
    answers 200 with it; anything else by that name is a 409."""
    asked = service.ask(
        run=own_run(request, pk),
        prompt=body.prompt,
        actor=agent(request),
        token=token(request),
        kind=body.kind,
        context=body.context,
        answer_schema=body.answer_schema,
        choices=body.choices,
        external_id=body.external_id,
        expires_in=body.expires_in,
    )
    return created(asked, RequestOut.of)


@router.get("/requests", response={200: list[RequestOut], **PROBLEMS}, tags=["requests"])
def find_requests(
    request,
    external_id: QueryText = "",
    run: RowId | None = None,
    status: HumanRequest.Status | None = None,
):
    """This token's request named ``external_id`` (a list of 0 or 1), or the requests
    of ``run``, oldest first, optionally of one ``status``: give one or the other."""
    if external_id and run is None and status is None:
        found = found_by_name(HumanRequest, token(request), external_id)
    elif run is not None and not external_id:
        found = owned(HumanRequest, token(request)).filter(run_id=run)
        if status is not None:
            found = found.filter(status=status)
    else:
        raise InvalidInput("external_id: give external_id, or run (and a status)")
    return [RequestOut.of(human) for human in found.select_related("answered_by").order_by("pk")]


@router.get(
    "/requests/{int:pk}",
    response={200: RequestOut, 429: s.Problem, **PROBLEMS},
    tags=["requests"],
)
async def read_request(request, pk: int, wait: int = 0, version: int | None = None):
    """Read a request. With ``wait=N`` (seconds, bounded) the answer comes as soon as
    the request changes from ``version`` (default: the version when asked), or after
    N seconds as it is; beyond the concurrent waits allowed, 429 with ``Retry-After``."""
    human = await sync_to_async(_request_now)(request, pk)
    known = human.version if version is None else version

    def changed() -> bool:
        human.refresh_from_db()
        return human.version != known

    watched = ("request", human.pk, human.version)
    refusal = await long_poll(token(request).pk, wait, changed, watched)
    return refusal or await sync_to_async(RequestOut.of)(human)


def _request_now(request, pk: int) -> HumanRequest:
    human = own_request(request, pk)
    service.expire_if_due(human, db_now())
    return human


@router.post(
    "/requests/{int:pk}/withdraw", response={200: RequestOut, **PROBLEMS}, tags=["requests"]
)
def withdraw(request, pk: int, body: s.WithdrawIn):
    """No answer is needed any more: the open request is cancelled and the run's wait
    settles. Already cancelled: 200 as it is. Answered, rejected or expired: 409."""
    human = service.withdraw(
        request=own_request(request, pk), actor=agent(request), reason=body.reason
    )
    return RequestOut.of(human)
