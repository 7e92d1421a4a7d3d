"""Recording what a project's Slack channel is to show (``runs.models.slack``), where it
happens: an operation or a request starts waiting (a message to post), or a person
decides it (its message is to say so). Each is written in the transaction of the
change, so a message is posted if and only if its item committed; the notification lane
posts and updates them (``runs.engine.slack``).

Without Slack configured (``OVERSIGHT_SLACK_BOT_TOKEN``), or in a project without a
channel, this costs nothing or one query and writes nothing.
"""

from django.conf import settings
from django.db.models import Case, F, Value, When
from django.db.models.functions import Now

from runs.models import HumanRequest, Operation, Run, SlackChannel, SlackMessage

State = SlackMessage.State


def waiting(item: Operation | HumanRequest, run: Run) -> None:
    """``item``, just proposed or asked in ``run``, waits for people."""
    if not settings.OVERSIGHT_SLACK_BOT_TOKEN:
        return
    channels = SlackChannel.objects.filter(project_id=run.project_id)
    if (channel := channels.values_list("channel", flat=True).first()) is None:
        return
    SlackMessage.objects.create(project_id=run.project_id, channel=channel, **_of(item))


def decided(item: Operation | HumanRequest, reviewer, comment: str) -> None:
    """A person's decision ended ``item``'s wait (``item`` as it left it): its message
    is to say how, e.g. "Approved by ana", instead of offering buttons. A message still
    to post is posted no more; one being posted just now is updated once posted
    (``runs.engine.slack`` reads ``outcome``)."""
    if not settings.OVERSIGHT_SLACK_BOT_TOKEN:
        return
    posted = When(state=State.POSTED, then=Value(State.TO_UPDATE))
    SlackMessage.objects.filter(**_of(item)).update(
        outcome=_outcome(item, reviewer.get_username(), comment)[:300],
        state=Case(posted, default=F("state")),
        next_attempt_at=Case(When(state=State.POSTED, then=Now()), default=F("next_attempt_at")),
    )


def _of(item: Operation | HumanRequest) -> dict:
    return {"operation": item} if isinstance(item, Operation) else {"request": item}


def _outcome(item: Operation | HumanRequest, who: str, comment: str) -> str:
    if item.status in (Operation.Status.REJECTED, HumanRequest.Status.REJECTED):
        return f"Rejected by {who}: {comment}"
    if isinstance(item, Operation):
        return f"Approved by {who}"
    if item.answer_kind == HumanRequest.AnswerKind.CHOOSE:
        return f"{who} chose “{item.answer}”"
    if item.answer_kind == HumanRequest.AnswerKind.APPROVE:
        return f"Signed off by {who}"
    return f"Answered by {who}"
