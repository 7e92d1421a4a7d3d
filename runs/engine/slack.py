"""Posting and updating Slack messages (``runs.models.slack``: projects' channels and
reviewers' direct messages), in the notification lane (``notifying``), outside any
transaction.

A round takes up to ``BATCH`` due messages (to post, or to update once decided),
claims each as webhook deliveries are claimed (``runs.engine.webhooks``: a conditional
update on the claim's version, ``attempts``, lasting past the deadline), and then makes
and sends each in a thread of its own: making an operation's message reads its preview
from the live target (``PREVIEW_BUDGET``) and sending it waits on Slack
(``OVERSIGHT_HTTP_DEADLINE``), so a slow target or a slow Slack holds that message's
thread, never the lane. Those threads read the database (the item, its run, a ledger's
balances) and close their connection when done; only the lane's thread writes.

Each call goes through ``http.request``'s guarded client (Slack's Web API is a public
host; a fake on loopback must be allowed). Slack answers 200 with ``"ok": false`` and
an error name for a refusal (``channel_not_found``, ``not_in_channel``, ``invalid_auth``),
and 429 when it limits the rate: each is a failed attempt, tried again as a webhook
delivery is (1, 5, 25, 125 minutes, then every 8 hours; the first wait is longer than
the seconds of Slack's ``Retry-After``), the eighth the last. A message whose item was
decided before it was posted is not posted at all.

A direct message is posted to its recipient's Slack user (Slack opens their
conversation with the app, and answers with its id, which ``chat.update`` needs), only
while they still want it (``_unwanted``), and never in their quiet hours
(``Preferences.quiet_at``): one found due then waits, out of the round's batch, until
they end. Updates go at any hour: Slack tells no one of an edited message.
"""

import json
import logging
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connections
from django.db.models import Case, Exists, OuterRef, Q, Value, When
from django.db.models.functions import Now

from runs.actions import http
from runs.clock import db_now
from runs.engine import slack_blocks
from runs.engine.deliveries import CLAIM_MARGIN, Refused, failure_reason, log_failed_attempt
from runs.engine.webhooks import MAX_ATTEMPTS, retry_wait
from runs.logs import about
from runs.models import HumanRequest, Operation, SlackMessage
from runs.permissions import projects_with_perm

log = logging.getLogger(__name__)
BATCH = 5
CLOSED_A_ROUND = 100
State = SlackMessage.State
DUE = (State.TO_POST, State.TO_UPDATE)


def deliver_slack(now: datetime | None = None) -> int:
    """Post or update the due messages once (see above); returns how many were tried."""
    if not settings.OVERSIGHT_SLACK_BOT_TOKEN:
        return 0
    now = now or db_now()
    due = _due(now)
    over = [m for m in due if m.state == State.TO_POST and _not_to_post(m)]
    for message in over:  # Over before it was posted: no buttons for what no longer waits.
        _as_read(message).update(state=State.DONE, next_attempt_at=None)
    quiet = [m for m in due if m not in over and _quiet(m, now)]
    for message in quiet:
        ends = message.recipient.oversight_preferences.quiet_ends(now)
        _as_read(message).update(next_attempt_at=ends)
    due = [m for m in due if m not in over and m not in quiet]
    if not due:
        return 0
    until = db_now() + timedelta(seconds=2 * settings.OVERSIGHT_HTTP_DEADLINE) + CLAIM_MARGIN
    claimed = [message for message in due if _claim(message, until)]
    if not claimed:
        return 0
    with ThreadPoolExecutor(len(claimed), thread_name_prefix="slack") as pool:
        sending = {pool.submit(_send, message): message for message in claimed}
        for sent in as_completed(sending):
            _outcome(sending[sent], sent)
    return len(claimed)


def close_ended() -> int:
    """Messages that still offer buttons for an item that stopped waiting without a
    person's decision (expired, withdrawn, cancelled with its run: a decision says so
    at once, ``runs.services.slack.decided``) are to say so; returns how many. Made
    once a minute by the lane; read through the index of posted messages."""
    if not settings.OVERSIGHT_SLACK_BOT_TOKEN:
        return 0
    ended = Q(operation__isnull=False) & ~Q(operation__status=Operation.Status.PROPOSED)
    ended |= Q(request__isnull=False) & ~Q(request__status=HumanRequest.Status.OPEN)
    found = SlackMessage.objects.filter(ended, state=State.POSTED)
    closed = 0
    for message in found.select_related("operation", "request")[:CLOSED_A_ROUND]:
        item = message.item
        closed += SlackMessage.objects.filter(pk=message.pk, state=State.POSTED).update(
            state=State.TO_UPDATE,
            outcome=f"No longer waits: it is {item.get_status_display().lower()}",
            next_attempt_at=Now(),
        )
    return closed


def _not_to_post(message: SlackMessage) -> bool:
    """Whether ``message``, to post, is not to be posted: its item was decided or no
    longer waits, or its recipient no longer wants it."""
    return bool(message.outcome) or not _waits(message) or _unwanted(message)


def _waits(message: SlackMessage) -> bool:
    if message.operation_id:
        return message.operation.status == Operation.Status.PROPOSED
    return message.request.status == HumanRequest.Status.OPEN


def _unwanted(message: SlackMessage) -> bool:
    """A direct message whose recipient, since it was recorded, turned direct messages
    off, linked another Slack user or none, was deactivated or no longer decides in the
    project: what waits is not shown to them."""
    if message.recipient_id is None:
        return False
    recipient = message.recipient
    identity = getattr(recipient, "slack_identity", None)
    return not (
        recipient.is_active
        and recipient.oversight_preferences.slack_direct
        and identity is not None
        and identity.slack_user == message.channel
        and message.recipient_decides
    )


def _quiet(message: SlackMessage, now: datetime) -> bool:
    """A direct message to post while its recipient is in their quiet hours."""
    if message.recipient_id is None or message.state != State.TO_POST:
        return False
    return message.recipient.oversight_preferences.quiet_at(now)


def _due(now: datetime) -> list[SlackMessage]:
    """The round's messages, with what making them reads: their item, its run and
    session; a direct message's recipient, their preferences and Slack user, and
    whether they still decide in the project (``recipient_decides``)."""
    found = SlackMessage.objects.filter(state__in=DUE, next_attempt_at__lte=now)
    related = (
        "operation__run__session",
        "request__run__session",
        "recipient__oversight_preferences",
        "recipient__slack_identity",
    )
    decides = projects_with_perm(OuterRef("recipient"), "decide_operation")
    found = found.annotate(recipient_decides=Exists(decides.filter(pk=OuterRef("project_id"))))
    return list(found.select_related(*related).order_by("next_attempt_at", "pk")[:BATCH])


def _as_read(message: SlackMessage):
    """The message, as long as it is as ``message`` last saw it (see
    ``runs.engine.webhooks._as_read``: ``attempts`` is the claim's version)."""
    return SlackMessage.objects.filter(
        pk=message.pk, state=message.state, attempts=message.attempts
    )


def _claim(message: SlackMessage, until: datetime) -> bool:
    claimed = _as_read(message).update(attempts=message.attempts + 1, next_attempt_at=until)
    message.attempts += 1
    return claimed == 1


def _send(message: SlackMessage) -> tuple[str, str]:
    """In a thread of the round: make the message and post it (or update it); returns
    its conversation's id and its ``ts``."""
    try:
        if message.state == State.TO_POST:
            said = slack_blocks.waiting(message)
            posted = call("chat.postMessage", {"channel": message.channel, **said})
            return posted["channel"], posted["ts"]
        said = slack_blocks.ended(message)
        call("chat.update", {"channel": message.channel, "ts": message.ts, **said})
        return message.channel, message.ts
    finally:
        connections.close_all()  # This thread's only.


def call(method: str, arguments: dict) -> dict:
    """One call of Slack's Web API with the bot token; its answer, or ``Refused``."""
    answer = http.exchange(
        "POST",
        settings.OVERSIGHT_SLACK_API_URL.rstrip("/") + f"/{method}",
        json.dumps(arguments).encode(),
        {
            "Content-Type": "application/json; charset=utf-8",
            "Authorization": f"Bearer {settings.OVERSIGHT_SLACK_BOT_TOKEN}",
        },
    )
    if answer.status != 200:
        raise Refused(f"{method}: Slack answered {answer}")
    said = json.loads(answer.raw)
    if not said.get("ok"):
        raise Refused(f"{method}: Slack refused it: {said.get('error', 'no reason given')}")
    return said


def _outcome(message: SlackMessage, sent: Future) -> None:
    try:
        channel, ts = sent.result()
    except Exception as error:
        _failed(message, error)
        return
    claimed = SlackMessage.objects.filter(pk=message.pk, attempts=message.attempts)
    if message.state == State.TO_UPDATE:
        claimed.filter(state=State.TO_UPDATE).update(state=State.DONE, next_attempt_at=None)
        return
    # Posted. Decided meanwhile (``runs.services.slack.decided`` found it still to post
    # and left it so, with its outcome): update it at once.
    decided = When(outcome__gt="", then=Value(State.TO_UPDATE))
    recorded = claimed.filter(state=State.TO_POST).update(
        channel=channel,
        ts=ts,
        state=Case(decided, default=Value(State.POSTED)),
        attempts=0,
        next_attempt_at=Case(When(outcome__gt="", then=Now()), default=None),
        last_error="",
    )
    if not recorded:
        _withdraw(message, channel, ts)


def _withdraw(message: SlackMessage, channel: str, ts: str) -> None:
    """A post under a claim that lapsed (this worker was stopped or slow, and another
    took the message over and posted it too): delete ours, which nothing would ever
    update, rather than leave its buttons beside the message that is kept."""
    try:
        call("chat.delete", {"channel": channel, "ts": ts})
    except Exception as error:
        log.warning("Slack: %s was posted twice; deleting ours failed: %s", message, error)
    else:
        log.info("Slack: %s was posted by another worker too; ours is deleted", message)


def _failed(message: SlackMessage, error: Exception) -> None:
    said = failure_reason(error)
    gave_up = message.attempts >= MAX_ATTEMPTS
    wait = retry_wait(message.attempts)
    item = message.operation or message.request
    with about(run_id=item.run_id, operation_id=message.operation_id):
        log_failed_attempt(
            log, f"Slack: {message}", message.attempts, said, None if gave_up else wait, error
        )
    _as_read(message).update(
        state=State.FAILED if gave_up else message.state,
        next_attempt_at=None if gave_up else db_now() + wait,
        last_error=f"attempt {message.attempts}: {said}",
    )
