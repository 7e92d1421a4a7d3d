"""Human requests: a question, a sign-off, a choice or data an agent asks of people,
which Oversight does not execute. Asking makes the run wait (needs_input); a reviewer
answers it (a question in words, a sign-off signed off, a choice with one of its
choices, data valid against its JSON Schema; any of them may be rejected with a reason),
or it expires, or the agent withdraws it, or its run ends. Each change is a checkpoint
of the run (``runs.transitions``), read by the agent by long-poll or through its feed.

A request's kind says what it asks; an agent that names none keeps what asking meant
before kinds (choices a choice, a schema data, neither a sign-off), and one whose kind
contradicts its choices or schema is refused rather than guessed at.

The rules of an answer, checked in one transaction under the run lock: the reviewer
holds the decide permission in the project and has no interest in the request (four
eyes, as for operations: ``permissions.own_interest``); the run is open; the request is
still open at the version the reviewer saw and has not expired.
"""

from datetime import datetime, timedelta
from typing import Any

import jsonschema_rs
from django.conf import settings
from django.db import transaction

from runs.actors import Actor
from runs.clock import db_now
from runs.errors import (
    DecisionRefused,
    IllegalTransition,
    InvalidInput,
    OperationExpired,
    RunNotAccepting,
    StaleVersion,
)
from runs.jsonsafe import check_json, max_depth
from runs.models import AgentToken, ApprovalPolicy, HumanRequest, Run
from runs.permissions import own_interest, require_project_perm
from runs.schema_work import Unmeasurable, measure, patterns
from runs.services import slack, webhooks
from runs.services.decisions import DECISION_TIMEOUT, in_key_order
from runs.services.identity import named
from runs.services.runs import (
    activate,
    awaiting_answers,
    open_request_ids,
    paused_by_alert,
    require_open,
    settle_wait,
    wait_for,
)
from runs.transitions import lock_run, record_request_created, transition_request

PROMPT_CHARS = 4000
CONTEXT_CHARS = 20_000
CHOICES_MAX = 20
CHOICE_CHARS = 200
EXTERNAL_ID_CHARS = 200
COMMENT_CHARS = 4000
TEXT_ANSWER_CHARS = 20_000
EXPIRES_IN_MIN = 60
EXPIRES_IN_MAX = 30 * 24 * 3600
# What checking an answer against a schema may cost (``answer_validator``): steps for
# one value of the answer (``runs.schema_work``), patterns compiled, the size of each.
SCHEMA_STEPS_MAX = 1000
PATTERNS_MAX = 100
PATTERN_BYTES_MAX = 256 * 1024
LINEAR_PATTERNS = jsonschema_rs.RegexOptions(
    size_limit=PATTERN_BYTES_MAX, dfa_size_limit=PATTERN_BYTES_MAX
)
# An answer checked in at most this many steps hears of all its problems, else the first.
LISTED_STEPS_MAX = 10_000
Kind = HumanRequest.AnswerKind
Asks = HumanRequest.Kind
Status = HumanRequest.Status
# The answer that accepts each kind of request; a rejection (with a reason) fits any.
ACCEPTED_BY = {
    Asks.QUESTION: Kind.ANSWER,
    Asks.SIGN_OFF: Kind.APPROVE,
    Asks.CHOICE: Kind.CHOOSE,
    Asks.DATA: Kind.ANSWER,
}


def ask(
    *,
    run: Run,
    prompt: str,
    actor: Actor,
    token: AgentToken | None = None,
    kind: str | None = None,
    context: str = "",
    answer_schema: dict | None = None,
    choices: list[str] | None = None,
    external_id: str = "",
    expires_in: int | None = None,
    now: datetime | None = None,
) -> tuple[HumanRequest, bool]:
    """Ask people ``prompt`` on behalf of ``run``'s agent: the run waits (needs_input)
    until the request ends. ``kind``: what it asks (``RequestKind``); without one, what
    ``choices`` or ``answer_schema`` make it, else a sign-off. Returns the request and
    whether it is new: a repeat with an ``external_id`` the token already gave a request
    of the same run asking the same thing returns that request, whatever happened since
    (``runs.services.identity``)."""
    kind = kind_of_request(kind, answer_schema, choices)
    _validate(prompt, context, answer_schema, choices, external_id, expires_in)
    now = now or db_now()
    expires_at = now + (
        timedelta(seconds=expires_in) if expires_in is not None else decision_timeout(run)
    )
    asked = {
        "prompt": prompt,
        "kind": kind,
        "context": context,
        "answer_schema": answer_schema,
        "choices": choices,
    }
    order = property_order(answer_schema)

    def describes(existing: HumanRequest) -> bool:
        return existing.run_id == run.pk and all(
            getattr(existing, field) == value for field, value in asked.items()
        )

    def create() -> tuple[HumanRequest, bool]:
        stored = asked | {"property_order": order}
        return _create(run, stored, actor, token, external_id, expires_at), True

    return named(
        HumanRequest,
        project_id=run.project_id,
        token=token,
        external_id=external_id,
        describes=describes,
        create=create,
    )


@transaction.atomic
def _create(run, asked, actor, token, external_id, expires_at) -> HumanRequest:
    current = lock_run(run.pk)
    require_open(current)
    if current.reason == Run.Reason.RECONCILIATION:
        raise RunNotAccepting(f"run {current.pk} is halted for reconciliation: {current.unblock}")
    if refusal := paused_by_alert(current):
        raise refusal
    request = HumanRequest.objects.create(
        run=current,
        project_id=current.project_id,
        external_id=external_id,
        asked_by_token=token,
        expires_at=expires_at,
        **asked,
    )
    record_request_created(request=request, actor=actor)
    activate(current, actor)
    wait_for(current, Run.Reason.NEEDS_INPUT, awaiting_answers(open_request_ids(current)), actor)
    webhooks.request_waiting(request, current)
    slack.waiting(request, current)
    return request


def decision_timeout(run: Run) -> timedelta:
    """How long people have to answer: the project's default rule's decision timeout
    (the rule for every action, with no condition), else the setting, as proposals."""
    default = (
        ApprovalPolicy.objects.filter(project_id=run.project_id, action="", when_argument="")
        .order_by("pk")
        .first()
    )
    return (default and default.decision_timeout) or settings.OVERSIGHT_DECISION_TIMEOUT


def property_order(answer_schema) -> list[str] | None:
    """The names of ``answer_schema``'s properties as the agent ordered them, read
    before the database reorders them."""
    properties = answer_schema.get("properties") if isinstance(answer_schema, dict) else None
    return list(properties) if isinstance(properties, dict) else None


def kind_of_request(kind: str | None, answer_schema, choices) -> str:
    """What the request asks: ``kind`` if its choices and schema fit it, or (without a
    kind) what they make it, as before kinds: choices a choice, a schema data, neither a
    sign-off. A contradiction is refused naming the field at fault, never guessed at."""
    if kind is None:
        if choices is not None:
            return Asks.CHOICE
        return Asks.SIGN_OFF if answer_schema is None else Asks.DATA
    if kind not in Asks.values:
        raise InvalidInput(f"kind: one of {', '.join(Asks.values)}, not {kind!r}")
    if kind == Asks.CHOICE and choices is None:
        raise InvalidInput("choices: a choice needs its choices")
    if kind == Asks.DATA and answer_schema is None:
        raise InvalidInput("answer_schema: data needs the JSON Schema it must be valid against")
    if choices is not None and kind != Asks.CHOICE:
        raise InvalidInput(f"choices: only a choice has choices, not a {Asks(kind).label.lower()}")
    if answer_schema is not None and kind != Asks.DATA:
        raise InvalidInput(
            f"answer_schema: only data has an answer_schema, not a {Asks(kind).label.lower()}"
        )
    return kind


def _validate(prompt, context, answer_schema, choices, external_id, expires_in) -> None:
    if not prompt.strip() or len(prompt) > PROMPT_CHARS:
        raise InvalidInput(f"prompt: 1 to {PROMPT_CHARS} characters, not blank")
    if len(context) > CONTEXT_CHARS:
        raise InvalidInput(f"context: at most {CONTEXT_CHARS} characters")
    if len(external_id) > EXTERNAL_ID_CHARS:
        raise InvalidInput(f"external_id: at most {EXTERNAL_ID_CHARS} characters")
    if answer_schema is not None and choices is not None:
        raise InvalidInput("choices: give choices or an answer_schema, not both")
    if answer_schema is not None:
        answer_validator(answer_schema)
    if choices is not None:
        _validate_choices(choices)
    if expires_in is not None and not EXPIRES_IN_MIN <= expires_in <= EXPIRES_IN_MAX:
        raise InvalidInput(f"expires_in: {EXPIRES_IN_MIN} to {EXPIRES_IN_MAX} seconds")


def _validate_choices(choices) -> None:
    if not isinstance(choices, list) or not 1 <= len(choices) <= CHOICES_MAX:
        raise InvalidInput(f"choices: a list of 1 to {CHOICES_MAX} strings")
    for choice in choices:
        if not isinstance(choice, str) or not choice.strip() or len(choice) > CHOICE_CHARS:
            raise InvalidInput(f"choices: each one 1 to {CHOICE_CHARS} characters, not blank")
    if len(set(choices)) != len(choices):
        raise InvalidInput("choices: each choice once")


def answer_validator(schema) -> tuple[jsonschema_rs.Validator, int]:
    """A validator for ``schema`` and the most steps it takes over one value of an
    answer. The agent wrote the schema, and a reviewer's answer is checked against it
    in the web request: it must be a valid JSON Schema object that checks any answer in
    bounded time. So it is within the size and depth limits of arguments; its patterns
    are at most ``PATTERNS_MAX``, each compiled to at most ``PATTERN_BYTES_MAX`` and run
    in time linear in the string (``regex``, not a backtracking engine: no lookaround or
    backreferences); and it takes at most ``SCHEMA_STEPS_MAX`` steps for a value, each
    ``$ref`` followed where it is used (``runs.schema_work``). Offline: a ``$ref`` to
    anything outside the schema is refused, never fetched."""
    if not isinstance(schema, dict):
        raise InvalidInput("answer_schema: a JSON Schema object")
    check_json("answer_schema", schema, max_bytes=settings.OVERSIGHT_API_MAX_ARGUMENTS_BYTES)
    if (count := patterns(schema)) > PATTERNS_MAX:
        raise InvalidInput(f"answer_schema: {count} patterns, over the limit of {PATTERNS_MAX}")
    try:
        validator = jsonschema_rs.validator_for(
            schema, offline=True, validate_formats=True, pattern_options=LINEAR_PATTERNS
        )
    except (ValueError, jsonschema_rs.ReferencingError) as error:
        raise InvalidInput(f"answer_schema: not a valid JSON Schema: {_reason(error)}") from None
    try:
        return validator, measure(schema, depth=max_depth(), limit=SCHEMA_STEPS_MAX)
    except Unmeasurable as error:
        raise InvalidInput(f"answer_schema: {error}") from None


def _reason(error: Exception) -> str:
    """The validator's reason, in a line; for a pattern it does not compile, the
    patterns it takes."""
    reason = str(error).splitlines()[0]
    if reason.endswith('is not a "regex"'):
        reason += (
            " (a pattern here runs in time linear in the answer: no lookaround or "
            f"backreferences, and at most {PATTERN_BYTES_MAX // 1024} KiB compiled)"
        )
    return reason


def allowed_kinds(request: HumanRequest) -> tuple[str, str]:
    """What a reviewer may do with ``request``: its one way to accept, or reject."""
    return ACCEPTED_BY[request.kind], Kind.REJECT


def answer(
    *,
    request: HumanRequest,
    reviewer,
    kind: str,
    version: int,
    data: Any = None,
    comment: str = "",
    via: str = "",
    now: datetime | None = None,
) -> HumanRequest:
    """Record ``reviewer``'s answer of ``kind`` to ``request`` as they saw it at
    ``version``. ``data``: the answer (for ``answer``: the text of a question, the data
    of a data request) or the choice (for ``choose``); ``comment``: optional, except the
    reason a rejection needs; ``via``: where it was given, if not the page (e.g.
    "slack"), for its checkpoint."""
    if kind not in allowed_kinds(request):
        allowed = " or ".join(allowed_kinds(request))
        raise InvalidInput(f"kind: this request is answered by {allowed}, not {kind}")
    if kind == Kind.REJECT and not comment.strip():
        raise InvalidInput("comment: a rejection needs a reason")
    if len(comment) > COMMENT_CHARS:
        raise InvalidInput(f"comment: at most {COMMENT_CHARS} characters")
    stored = _checked_data(request, kind, data)
    require_project_perm(reviewer, request.project, "decide_operation")
    now = now or db_now()
    if expire_if_due(request, now):
        raise OperationExpired(f"request {request.pk} expired before this answer")
    return _record_answer(request, reviewer, kind, version, stored, comment, via, now)


def _checked_data(request: HumanRequest, kind: str, data: Any) -> Any:
    """What the answer stores: a question's text; the data, valid against the schema;
    the choice, one of the request's; nothing for approve and reject."""
    if kind == Kind.CHOOSE:
        if data not in request.choices:
            raise InvalidInput("data: choose one of the request's choices")
        return data
    if kind == Kind.ANSWER and request.kind == Asks.QUESTION:
        if not isinstance(data, str) or not data.strip() or len(data) > TEXT_ANSWER_CHARS:
            raise InvalidInput(f"data: an answer in words, 1 to {TEXT_ANSWER_CHARS} characters")
        return data
    if kind == Kind.ANSWER:
        if problems := _problems(*answer_validator(request.answer_schema), data):
            raise InvalidInput("; ".join(problems[:5]))
        return data
    return None


def _problems(validator: jsonschema_rs.Validator, steps: int, data: Any) -> list[str]:
    """What is wrong with ``data``: every problem if checking it takes at most
    ``LISTED_STEPS_MAX`` steps, else the first. Listing builds each problem (some 10
    µs apiece) and a large answer may have millions: 10,000 values that each fail 100
    checks took forty seconds to refuse."""
    if _values(data) * steps <= LISTED_STEPS_MAX:
        return [_said(error) for error in validator.iter_errors(data)]
    try:
        validator.validate(data)
    except jsonschema_rs.ValidationError as error:
        return [_said(error)]
    return []


def _said(error: jsonschema_rs.ValidationError) -> str:
    return f"data{''.join(f'.{part}' for part in error.instance_path)}: {error.message}"


def _values(data: Any) -> int:
    """How many values ``data`` holds, itself included."""
    count, stack = 0, [data]
    while stack:
        value = stack.pop()
        count += 1
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return count


@transaction.atomic
def _record_answer(request, reviewer, kind, version, data, comment, via, now) -> HumanRequest:
    run = lock_run(request.run_id)
    current = HumanRequest.objects.select_related("run__session", "asked_by_token").get(
        pk=request.pk
    )
    require_open(run)
    if current.status != Status.OPEN:
        raise DecisionRefused(
            f"request {current.pk} is {current.get_status_display()}; it no longer awaits an answer"
        )
    if current.version != version:
        raise StaleVersion(f"request {current.pk} changed since you read it: look again")
    if conflict := own_interest(current, reviewer):
        raise DecisionRefused(conflict)
    actor = Actor.of_user(reviewer)
    status = Status.REJECTED if kind == Kind.REJECT else Status.ANSWERED
    changes = {
        "answer_kind": kind,
        "answer": data,
        "comment": comment,
        "answered_by": reviewer,
        "answered_at": now,
    }
    transition_request(
        request=current,
        to=status,
        actor=actor,
        reason=comment or Kind(kind).label,
        changes=changes,
        detail={
            "answer": {
                **_answer(current.kind, kind, reviewer, now, comment, data),
                **({"via": via} if via else {}),
            }
        },
    )
    webhooks.decided(current, reviewer, comment)
    slack.decided(current, reviewer, comment)
    settle_wait(run, actor)
    request.refresh_from_db()
    return request


def describe_answer(request: HumanRequest) -> dict | None:
    """The answer as the agent reads it, or None while there is none."""
    if not request.answer_kind:
        return None
    return _answer(
        request.kind,
        request.answer_kind,
        request.answered_by,
        request.answered_at,
        request.comment,
        request.answer,
    )


def _answer(asked: str, kind: str, reviewer, at: datetime, comment: str, data: Any) -> dict:
    """``kind`` is what the reviewer did, ``request_kind`` what was asked: a question's
    text and a data request's data are both answers, told apart by the latter."""
    return {
        "request_kind": asked,
        "kind": kind,
        "by": reviewer.get_username(),
        "at": at.isoformat(),
        "comment": comment,
        "data": data,
    }


@transaction.atomic
def withdraw(*, request: HumanRequest, actor: Actor, reason: str = "") -> HumanRequest:
    """The agent no longer needs an answer: the request is cancelled (already cancelled:
    as it is). An answered, rejected or expired request is refused (409)."""
    expire_if_due(request, db_now())
    run = lock_run(request.run_id)
    request.refresh_from_db()
    if request.status == Status.CANCELLED:
        return request
    if request.status != Status.OPEN:
        raise IllegalTransition(
            f"request {request.pk} is {request.get_status_display()}; read its answer"
        )
    transition_request(
        request=request,
        to=Status.CANCELLED,
        actor=actor,
        reason=reason or "withdrawn by the agent",
    )
    settle_wait(run, actor)
    return request


def expire_if_due(request: HumanRequest, now: datetime) -> bool:
    """Expire ``request`` if nobody answered by its deadline; returns whether it is
    (now) expired. Fail closed, as for operations: recorded as the policy's doing, and
    nothing to do (no run lock) when the request as read is not due."""
    if request.status != Status.EXPIRED and not _due(request, now):
        return False
    with transaction.atomic():
        run = lock_run(request.run_id)
        request.refresh_from_db()
        if request.status == Status.EXPIRED:
            return True
        if not _due(request, now):
            return False
        actor = Actor.policy(DECISION_TIMEOUT)
        transition_request(request=request, to=Status.EXPIRED, actor=actor, reason=DECISION_TIMEOUT)
        settle_wait(run, actor)
        return True


def _due(request: HumanRequest, now: datetime) -> bool:
    return request.status == Status.OPEN and request.expires_at <= now


def expire_due_requests(now: datetime | None = None) -> int:
    """Expire every open request past its deadline (in the database's time), each in
    its own short transaction."""
    now = now or db_now()
    due = HumanRequest.objects.filter(status=Status.OPEN, expires_at__lte=now)
    due = in_key_order(due, "run_id", "status", "expires_at")
    return sum(expire_if_due(request, now) for request in due)
