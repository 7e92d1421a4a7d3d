"""Recording what a project's webhooks hear of, where it happens: an operation starts
waiting for a decision (``proposals``), a request is asked (``requests``), either is
decided by a person (``decisions``, ``requests``), an alert is raised (``alerts``).

Each is recorded in the transaction of the change it announces, so that an event is
sent if and only if its change committed (the notification lane sends it, later:
``runs.engine.webhooks``). When no active endpoint of the project wants it, that costs
one query and writes nothing; otherwise its data is read once, fixed as it is now (the
same on every attempt of every delivery), and one delivery per endpoint is queued.

What the data says is Oversight's facts and links, and the agent's words as it wrote
them (a goal, a prompt, a summary), cut to ``TEXT_MOST`` characters: a receiver shows
them as another's words, as Oversight's emails quote them.
"""

from collections.abc import Callable

from runs.engine.mailtext import link
from runs.models import Alert, HumanRequest, Operation, Run, WebhookDelivery, WebhookEndpoint
from runs.models import WebhookEvent as Event

Kind = Event.Kind
# An agent's words in an event, at most: as many as the reviewers' emails quote of a
# prompt (its page, linked, shows the rest).
TEXT_MOST = 1000


def operation_waiting(operation: Operation, run: Run) -> None:
    """``operation``, just proposed in ``run``, waits for people's decision."""
    _record(run.project_id, Kind.OPERATION_WAITING, lambda: _operation(operation, run))


def request_waiting(request: HumanRequest, run: Run) -> None:
    """``request``, just asked in ``run``, waits for an answer."""
    _record(run.project_id, Kind.REQUEST_WAITING, lambda: _request(request, run))


def decided(item: Operation | HumanRequest, reviewer, comment: str) -> None:
    """A person's decision ended ``item``'s wait (approved or rejected; answered or
    rejected), with their ``comment``; ``item`` is as the decision left it."""
    _record(item.project_id, Kind.DECIDED, lambda: _decision(item, reviewer, comment))


def alert_raised(alert: Alert) -> None:
    _record(alert.project_id, Kind.ALERT_RAISED, lambda: _alert(alert))


def _record(project_id: int, kind: str, data: Callable[[], dict]) -> None:
    """Queue ``kind`` for each active endpoint of the project that wants it, in the
    caller's transaction."""
    endpoints = WebhookEndpoint.objects.filter(project_id=project_id, active=True)
    wanting = [pk for pk, events in endpoints.values_list("pk", "events") if kind in events]
    if not wanting:
        return
    event = Event.objects.create(project_id=project_id, kind=kind, data=data())
    WebhookDelivery.objects.bulk_create(
        WebhookDelivery(endpoint_id=pk, event=event) for pk in wanting
    )


def _operation(operation: Operation, run: Run) -> dict:
    return {
        "item": "operation",
        "id": operation.pk,
        "gist": operation.gist,
        "action": operation.action,
        "summary": operation.summary,
        "risk": operation.risk,
        "required_approvals": operation.required_approvals,
        "deadline": operation.expires_at.isoformat(),
        **_run(run),
        "link": link("operation", operation.pk),
    }


def _request(request: HumanRequest, run: Run) -> dict:
    return {
        "item": "request",
        "id": request.pk,
        "kind": request.kind,
        "prompt": _clip(request.prompt),
        "choices": request.choices,
        "deadline": request.expires_at.isoformat(),
        **_run(run),
        "link": link("request", request.pk),
    }


def _decision(item: Operation | HumanRequest, reviewer, comment: str) -> dict:
    noun = "operation" if isinstance(item, Operation) else "request"
    return {
        "item": noun,
        "id": item.pk,
        "outcome": item.status,
        "by": reviewer.get_username(),
        "comment": _clip(comment),
        "run": item.run_id,
        "link": link(noun, item.pk),
    }


def _alert(alert: Alert) -> dict:
    return {
        "item": "alert",
        "id": alert.pk,
        "operation": alert.operation_id,
        "summary": _clip(alert.summary),
        **_run(alert.run),
        "link": link("alerts"),
    }


def _run(run: Run) -> dict:
    """The run an item belongs to: its number, its agent and the agent's goal."""
    return {"run": run.pk, "agent": run.session.agent, "goal": _clip(run.goal)}


def _clip(text: str) -> str:
    return text if len(text) <= TEXT_MOST else f"{text[: TEXT_MOST - 1]}…"
