"""Recording what Slack is to show (``runs.models.slack``): a project's channel, and
the direct messages of the reviewers who chose them. Where it happens: an operation or
a request starts waiting (messages to post), or a person decides it (its messages are
to say so). Each is written in the transaction of the change, so a message is posted if
and only if its item committed; the notification lane posts and updates them
(``runs.engine.slack``).

Without Slack configured (``OVERSIGHT_SLACK_BOT_TOKEN``) this costs nothing; in a project
without a channel where no one chose direct messages, two queries, and writes nothing.
"""

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Case, Exists, F, OuterRef, Value, When
from django.db.models.functions import Now

from runs.models import HumanRequest, Operation, Run, SlackChannel, SlackMessage
from runs.permissions import own_interest, projects_with_perm

State = SlackMessage.State


def waiting(item: Operation | HumanRequest, run: Run) -> None:
    """``item``, just proposed or asked in ``run``, waits for people: a message to the
    project's channel, if it has one, and one to each reviewer who chose them."""
    if not settings.OVERSIGHT_SLACK_BOT_TOKEN:
        return
    channels = SlackChannel.objects.filter(project_id=run.project_id)
    channel = channels.values_list("channel", flat=True).first()
    messages = [(None, channel)] if channel is not None else []
    messages += [(user, user.slack_identity.slack_user) for user in _direct_to(item, run)]
    SlackMessage.objects.bulk_create(
        SlackMessage(project_id=run.project_id, recipient=user, channel=to, **_of(item))
        for user, to in messages
    )


def _direct_to(item: Operation | HumanRequest, run: Run) -> list:
    """Who gets ``item`` in a direct message: the people the emails would tell of it
    (active, deciding in ``run``'s project, with no interest of their own in it:
    ``permissions.own_interest``) who chose direct messages and whose Slack user is
    linked; with their ``slack_identity``."""
    decides = projects_with_perm(OuterRef("pk"), "decide_operation").filter(pk=run.project_id)
    chose = get_user_model().objects.filter(
        Exists(decides),
        is_active=True,
        oversight_preferences__slack_direct=True,
        slack_identity__isnull=False,
    )
    return [
        user for user in chose.select_related("slack_identity") if own_interest(item, user) is None
    ]


def decided(item: Operation | HumanRequest, reviewer, comment: str) -> None:
    """A person's decision ended ``item``'s wait (``item`` as it left it): its messages,
    in the channel and direct, are to say how, e.g. "Approved by ana", instead of
    offering buttons. A message still to post (held by its recipient's quiet hours, or
    not yet posted) is posted no more; one being posted just now is updated once posted
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
