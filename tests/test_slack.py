"""Slack as a real app (#36 item 1), against a fake of Slack on loopback: what waits is
posted to the project's channel with its effect and buttons; a linked reviewer's press
decides through the same rules as the page, its checkpoint naming Slack; the message
then says who decided; a press by the proposer's owner, an auditor, an unlinked user, a
user who lost the role, with a forged signature or an old timestamp decides nothing."""

import json
import re
import time
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import connections

from runs.actions.base import PREVIEW_BUDGET
from runs.actions.files import workspace_of
from runs.clock import db_now
from runs.engine.slack import close_ended, deliver_slack
from runs.models import (
    Checkpoint,
    Decision,
    HumanRequest,
    Operation,
    SlackChannel,
    SlackIdentity,
    SlackLinkCode,
    SlackMessage,
)
from runs.services.decisions import expire_due_operations
from runs.services.requests import ask
from runs.services.runs import start_run
from tests.conftest import AGENT, http_arguments
from tests.fake_slack import (
    BOT_TOKEN,
    CHANNEL,
    SIGNING_SECRET,
    TEAM,
    FakeSlack,
    buttons,
    callback,
    text_of,
)
from tests.helpers import decide_on
from tests.test_worker_effects import Hanging

pytestmark = pytest.mark.django_db(transaction=True)  # The lane's threads read the rows.
State = SlackMessage.State


@pytest.fixture
def slack(settings, project):
    """Oversight set up for a fake Slack, and the project connected to a channel."""
    fake = FakeSlack()
    settings.OVERSIGHT_SLACK_BOT_TOKEN = BOT_TOKEN
    settings.OVERSIGHT_SLACK_SIGNING_SECRET = SIGNING_SECRET
    settings.OVERSIGHT_SLACK_API_URL = f"{fake.base}/api/"
    settings.OVERSIGHT_HTTP_ALLOWED_HOSTS = [fake.host]
    SlackChannel.objects.create(project=project, channel=CHANNEL)
    yield fake
    fake.stop()


def linked(user, slack_user: str):
    SlackIdentity.objects.create(user=user, team=TEAM, slack_user=slack_user)
    return slack_user


def linked_once(user) -> str:
    """``user``'s Slack user, linked if it was not yet."""
    identity, _ = SlackIdentity.objects.get_or_create(user=user, team=TEAM, slack_user="U0R")
    return identity.slack_user


def posted(slack: FakeSlack) -> dict:
    """Run the lane's round; the one message it posted."""
    assert deliver_slack() == 1
    return slack.only_message()


def test_a_waiting_operation_is_posted_with_its_effect_its_facts_and_buttons(
    slack, propose, settings
):
    operation = propose("call-1", arguments={"from": "A", "to": "B", "amount": "1250.00"})

    message = posted(slack)

    assert message["channel"] == CHANNEL
    shown = text_of(message)
    assert (
        f"<{settings.OVERSIGHT_BASE_URL}/operations/{operation.pk}/|Operation {operation.pk}>"
        in shown
    )
    assert "A → B: 1,250.00" in shown
    assert "*Risk*\nMedium" in shown and "*Agent*\ntest-agent" in shown
    assert "*Run goal*\nPay the supplier invoice" in shown
    assert f"<!date^{int(operation.expires_at.timestamp())}^" in shown
    approve = buttons(message)["Approve"]
    assert approve["value"].startswith(f"operation:{operation.pk}:{operation.arguments_hash}:")
    assert set(buttons(message)) == {"Approve", "Reject…"}
    assert SlackMessage.objects.get().state == State.POSTED
    assert deliver_slack() == 0  # Posted once.


def test_a_linked_reviewer_approves_from_slack_and_the_message_says_so(
    slack, propose, client, reviewer
):
    operation = propose("call-1")
    button = buttons(posted(slack))["Approve"]

    answered = slack.press(client, button, linked(reviewer, "U0REVIEWER"))

    assert answered.status_code == 200
    assert slack.replies() == [f"You approved operation {operation.pk}."]
    operation.refresh_from_db()
    assert operation.status == Operation.Status.APPROVED
    assert Decision.objects.get(operation=operation).reviewer == reviewer
    checkpoint = Checkpoint.objects.filter(to_status=Operation.Status.APPROVED).get()
    assert checkpoint.state["decision"]["via"] == "slack"
    assert checkpoint.state["decision"]["by"] == "reviewer"
    assert deliver_slack() == 1
    [update] = slack.called("chat.update")
    assert update["ts"] in slack.messages and "Approved by reviewer" in text_of(update)
    assert buttons(update) == {}


def test_two_operations_in_a_row_are_each_decided_from_slack(slack, propose, client, reviewer):
    """A second press in the same channel, as the first: not only the first works."""
    first, second = propose("call-1"), propose("call-2")
    assert deliver_slack() == 2
    pressed = linked(reviewer, "U0REVIEWER")
    for message in list(slack.messages.values()):
        slack.press(client, buttons(message)["Approve"], pressed)

    assert len(slack.replies(2)) == 2
    statuses = Operation.objects.filter(pk__in=[first.pk, second.pk]).values_list("status")
    assert {status for (status,) in statuses} == {Operation.Status.APPROVED}
    assert deliver_slack() == 2
    assert len(slack.called("chat.update")) == 2


@pytest.mark.parametrize(
    ("presser", "refusal"),
    [
        ("owner", "you own this run"),
        ("auditor", "does not allow this"),
        ("stranger", "no operation"),
    ],
)
def test_a_press_by_someone_who_may_not_decide_decides_nothing(
    slack, propose, client, request, presser, refusal
):
    if presser == "stranger":
        user = get_user_model().objects.create_user("stranger", password="pw")
    else:
        user = request.getfixturevalue(presser)
    operation = propose("call-1")
    button = buttons(posted(slack))["Approve"]

    slack.press(client, button, linked(user, "U0PRESSER"))

    [said] = slack.replies()
    assert said.startswith("Nothing was decided: ") and refusal in said
    assert Operation.objects.get(pk=operation.pk).status == Operation.Status.PROPOSED
    assert not Decision.objects.exists()


def test_a_reviewer_who_lost_the_role_decides_nothing(slack, propose, client, reviewer, project):
    operation = propose("call-1")
    button = buttons(posted(slack))["Approve"]
    pressed = linked(reviewer, "U0REVIEWER")
    project.memberships.filter(user=reviewer).delete()

    slack.press(client, button, pressed)

    assert f"no operation {operation.pk} in your projects" in slack.replies()[0]
    assert Operation.objects.get(pk=operation.pk).status == Operation.Status.PROPOSED


def code_for(client, user) -> str:
    """The one-time code ``user``'s account page gives them."""
    client.force_login(user)
    page = client.post("/account/slack/code/").text
    return re.search(r'id="new-token" class="code" value="([0-9a-f]+)"', page).group(1)


def test_an_unlinked_user_links_with_their_account_pages_code_once(
    slack, propose, client, reviewer, owner
):
    operation = propose("call-1")
    button = buttons(posted(slack))["Approve"]

    slack.press(client, button, "U0NEWCOMER")

    [dialog] = slack.called("views.open")
    assert dialog["view"]["callback_id"] == "link" and not Decision.objects.exists()
    code = code_for(client, reviewer)
    assert SlackLinkCode.objects.get().digest != code  # Only its hash is kept.
    wrong = slack.submit(client, "U0NEWCOMER", "code", "0000000000")
    linked_now = slack.submit(client, "U0NEWCOMER", "code", code.upper())
    again = slack.submit(client, "U0OWNER", "code", code)  # Used up.

    assert wrong.json()["errors"]["code"].startswith("This code is not valid")
    assert linked_now.json()["response_action"] == "update"
    assert "act as reviewer" in json.dumps(linked_now.json())
    assert again.json()["errors"]["code"].startswith("This code is not valid")
    identity = SlackIdentity.objects.get()
    assert (identity.user, identity.team, identity.slack_user) == (reviewer, TEAM, "U0NEWCOMER")
    assert not SlackLinkCode.objects.exists()

    slack.press(client, button, "U0NEWCOMER")

    assert slack.replies()[0] == f"You approved operation {operation.pk}."


def test_a_code_links_no_slack_user_already_someone_elses_and_expires(
    slack, propose, client, reviewer, reviewer2
):
    propose("call-1")
    button = buttons(posted(slack))["Approve"]
    taken = linked(reviewer2, "U0TAKEN")
    slack.press(client, button, "U0LATE")
    code = code_for(client, reviewer)

    refused = slack.submit(client, taken, "code", code)
    SlackLinkCode.objects.update(expires_at=db_now() - timedelta(seconds=1))
    expired = slack.submit(client, "U0LATE", "code", code)

    assert refused.json()["errors"]["code"] == "Your Slack user is linked to another account."
    assert expired.json()["errors"]["code"].startswith("This code is not valid")
    assert list(SlackIdentity.objects.values_list("slack_user", flat=True)) == [taken]


def test_a_deactivated_user_decides_nothing(slack, propose, client, reviewer):
    operation = propose("call-1")
    button = buttons(posted(slack))["Approve"]
    pressed = linked(reviewer, "U0REVIEWER")
    get_user_model().objects.filter(pk=reviewer.pk).update(is_active=False)

    slack.press(client, button, pressed)

    assert slack.called("views.open")[0]["view"]["callback_id"] == "link"
    assert Operation.objects.get(pk=operation.pk).status == Operation.Status.PROPOSED


@pytest.mark.parametrize(
    ("signing", "why"),
    [
        ({"secret": "not-the-signing-secret"}, "The signature is not Slack's."),
        ({"age": 360}, "The timestamp is missing or not within five minutes of now."),
        ({"age": -360}, "The timestamp is missing or not within five minutes of now."),
    ],
)
def test_a_forged_signature_or_a_replay_is_refused_and_decides_nothing(
    slack, propose, client, reviewer, signing, why
):
    operation = propose("call-1")
    button = buttons(posted(slack))["Approve"]

    answered = slack.press(client, button, linked(reviewer, "U0REVIEWER"), **signing)

    assert (answered.status_code, answered.text) == (401, why)
    assert Operation.objects.get(pk=operation.pk).status == Operation.Status.PROPOSED
    assert slack.replies(1, seconds=0.5) == []


def test_rejecting_asks_the_reason_in_a_dialog_and_the_agent_reads_it(
    slack, propose, client, reviewer
):
    operation = propose("call-1")
    button = buttons(posted(slack))["Reject…"]
    pressed = linked(reviewer, "U0REVIEWER")

    slack.press(client, button, pressed)
    [opened] = slack.called("views.open")
    empty = slack.submit_reason(client, pressed, "  ")
    refused = slack.submit_reason(client, pressed, "Wrong supplier account")

    assert opened["trigger_id"] == "trigger-1"
    assert empty.json()["response_action"] == "errors"
    assert "a rejection needs a reason" in empty.json()["errors"]["reason"]
    assert refused.status_code == 200 and refused.content == b""
    operation.refresh_from_db()
    assert (operation.status, operation.status_reason) == (
        Operation.Status.REJECTED,
        "Wrong supplier account",
    )
    assert slack.replies() == [f"You rejected operation {operation.pk}."]
    deliver_slack()
    assert "Rejected by reviewer: Wrong supplier account" in text_of(slack.only_message())


def test_an_irreversible_operation_is_approved_on_its_page_only(slack, propose, client, reviewer):
    email = {"to": ["customers@example.com"], "subject": "Maintenance", "body": "Saturday."}
    operation = propose(
        "call-1",
        action="email.send",
        arguments=email,
        rollback_kind=Operation.RollbackKind.OUT_OF_BAND,
    )
    message = posted(slack)
    assert set(buttons(message)) == {"Open to approve", "Reject…"}
    assert buttons(message)["Open to approve"]["url"].endswith(f"/operations/{operation.pk}/")
    forged = buttons(message)["Reject…"] | {"action_id": "approve"}

    slack.press(client, forged, linked(reviewer, "U0REVIEWER"))

    assert "nothing can undo it: approve it on its page" in slack.replies()[0]
    assert Operation.objects.get(pk=operation.pk).status == Operation.Status.PROPOSED


def test_a_target_changed_since_the_message_makes_the_reviewer_look_again(
    slack, propose, client, reviewer, project
):
    note = workspace_of(project) / "notes" / "plan.md"
    note.parent.mkdir(parents=True)
    note.write_text("one\n")
    arguments = {"path": "notes/plan.md", "content": "one\ntwo\n", "expected_sha256": None}
    kind = Operation.RollbackKind.IN_BAND
    operation = propose("call-1", action="file.write", arguments=arguments, rollback_kind=kind)
    message = posted(slack)
    assert " one\n+two" in text_of(message)
    note.write_text("zero\n")

    slack.press(client, buttons(message)["Approve"], linked(reviewer, "U0REVIEWER"))

    assert "look again" in slack.replies()[0]
    assert Operation.objects.get(pk=operation.pk).status == Operation.Status.PROPOSED


def test_a_choice_is_answered_from_slack(slack, run, client, reviewer):
    request, _ = ask(
        run=run,
        prompt="Which region should the cluster go to?",
        choices=["eu-west-1", "us-east-1"],
        actor=AGENT,
    )
    message = posted(slack)
    assert set(buttons(message)) == {"eu-west-1", "us-east-1", "Reject…"}

    slack.press(client, buttons(message)["us-east-1"], linked(reviewer, "U0REVIEWER"))

    request.refresh_from_db()
    assert (request.status, request.answer) == (HumanRequest.Status.ANSWERED, "us-east-1")
    deliver_slack()
    assert "reviewer chose “us-east-1”" in text_of(slack.only_message())


def test_decided_on_the_page_the_message_says_so_or_is_never_posted(
    slack, propose, reviewer, reviewer2
):
    shown, unposted = propose("call-1"), propose("call-2")
    SlackMessage.objects.filter(operation=unposted).update(next_attempt_at=db_now() + timedelta(1))
    assert deliver_slack() == 1
    decide_on(shown, reviewer)
    decide_on(unposted, reviewer2, "reject", comment="Not this week")

    assert deliver_slack(db_now() + timedelta(days=2)) == 1

    [update] = slack.called("chat.update")
    assert "Approved by reviewer" in text_of(update)
    assert len(slack.called("chat.postMessage")) == 1
    states = dict(SlackMessage.objects.values_list("operation_id", "state"))
    assert states == {shown.pk: State.DONE, unposted.pk: State.DONE}


def test_a_refusal_by_slack_is_tried_again_later(slack, propose):
    propose("call-1")
    slack.refuse["chat.postMessage"] = "not_in_channel"

    assert deliver_slack() == 1

    message = SlackMessage.objects.get()
    assert (message.state, message.attempts) == (State.TO_POST, 1)
    assert message.last_error == "attempt 1: chat.postMessage: Slack refused it: not_in_channel"
    assert deliver_slack() == 0  # Not before a minute.
    del slack.refuse["chat.postMessage"]
    assert deliver_slack(db_now() + timedelta(minutes=2)) == 1
    assert SlackMessage.objects.get().state == State.POSTED


def test_without_slack_nothing_is_recorded(settings, project, propose):
    SlackChannel.objects.create(project=project, channel=CHANNEL)
    propose("call-1")
    assert not SlackMessage.objects.exists() and deliver_slack() == 0


def test_the_account_page_shows_the_linked_slack_user_and_unlinks_it(client, reviewer, slack):
    linked(reviewer, "U0REVIEWER")
    client.force_login(reviewer)

    assert "Slack user <code>U0REVIEWER</code>" in client.get("/account/").text
    assert client.post("/account/slack/unlink/").status_code == 302

    assert not SlackIdentity.objects.exists()
    assert "No Slack user is linked to your account." in client.get("/account/").text


def test_without_slack_the_account_page_says_nothing_of_it(client, reviewer):
    client.force_login(reviewer)
    assert 'id="slack-identity"' not in client.get("/account/").text


def test_connect_slack_connects_a_project_to_a_channel_and_off(project, slack):
    SlackChannel.objects.all().delete()
    out = StringIO()

    call_command("connect_slack", "--project", "acme", "--channel", "C0NEWS", stdout=out)
    assert SlackChannel.objects.get(project=project).channel == "C0NEWS"
    call_command("connect_slack", "--project", "acme", "--off", stdout=out)
    assert not SlackChannel.objects.exists()
    with pytest.raises(CommandError, match="is not a channel id"):
        call_command("connect_slack", "--project", "acme", "--channel", "#reviews")


def test_connect_slack_without_the_apps_settings_connects_and_says_nothing_is_posted(
    project,
):
    said = StringIO()
    call_command("connect_slack", "--project", "acme", "--channel", "C0NEWS", stderr=said)
    assert SlackChannel.objects.get(project=project).channel == "C0NEWS"
    assert said.getvalue().startswith("Slack is not set up here yet: nothing is posted")


def test_an_item_that_stops_waiting_undecided_loses_its_buttons_or_is_never_posted(
    slack, propose, run
):
    shown, unposted = propose("call-1"), propose("call-2")
    SlackMessage.objects.filter(operation=unposted).update(next_attempt_at=db_now() + timedelta(1))
    assert deliver_slack() == 1
    later = max(shown.expires_at, unposted.expires_at) + timedelta(minutes=1)
    assert expire_due_operations(later) == 2

    assert close_ended() == 1
    assert deliver_slack(db_now() + timedelta(days=2)) == 1

    [update] = slack.called("chat.update")
    assert "No longer waits: it is expired" in text_of(update) and buttons(update) == {}
    assert len(slack.called("chat.postMessage")) == 1
    assert set(SlackMessage.objects.values_list("state", flat=True)) == {State.DONE}
    assert close_ended() == 0


@pytest.mark.parametrize(
    "payload",
    [
        {"type": "block_actions", "team": {"id": TEAM}, "user": {"id": "U0R"}, "actions": {}},
        {"type": "block_actions", "team": {"id": TEAM}, "user": {"id": "U0R"}, "actions": [1]},
        {"type": "block_actions", "team": {"id": TEAM}, "user": {"id": "U0R"}, "actions": "x"},
        {"type": "view_submission", "team": {"id": TEAM}, "user": {"id": "U0R"}, "view": "x"},
        {"type": "view_submission", "team": {"id": TEAM}, "user": {"id": "U0R"}},
        {"type": "block_actions", "team": {"id": "T\x00"}, "user": {"id": "U0R"}},
        {"type": "block_actions", "team": TEAM, "user": {"id": "U0R"}},
        {"type": "block_actions"},
        [],
    ],
)
def test_a_signed_payload_not_of_oversight_s_shape_is_refused_without_an_error(
    slack, client, reviewer, payload
):
    linked(reviewer, "U0R")
    answered = callback(client, payload)
    assert answered.status_code in (200, 400)


@pytest.mark.parametrize(
    "value",
    ["", "operation", "operation:x:y:z", "operation:1", "request:1:2:3", "request:1:x", "x:1:2"],
)
def test_a_button_not_of_oversight_s_making_decides_nothing(
    slack, propose, client, reviewer, value
):
    propose("call-1")
    posted(slack)
    for action in ("approve", "choose-0", "sign_off"):
        slack.press(client, {"action_id": action, "value": value}, linked_once(reviewer))
    said = slack.replies(3)
    assert all(reply.startswith("Nothing was decided: ") for reply in said), said
    assert not Decision.objects.exists()


def test_a_choice_for_a_question_decides_nothing(slack, run, client, reviewer):
    request, _ = ask(run=run, prompt="What is the budget?", actor=AGENT)
    slack.press(
        client,
        {"action_id": "choose-0", "value": f"request:{request.pk}:1:0"},
        linked(reviewer, "U0R"),
    )
    assert slack.replies()[0].startswith("Nothing was decided: ")
    assert HumanRequest.objects.get().status == HumanRequest.Status.OPEN


def test_a_decision_made_while_slack_posts_the_message_is_shown_at_once(slack, propose, reviewer):
    operation = propose("call-1")

    def decided_meanwhile():
        decide_on(Operation.objects.get(pk=operation.pk), reviewer)
        connections.close_all()  # The fake's thread's own.

    slack.while_posting = decided_meanwhile
    assert deliver_slack() == 1
    slack.while_posting = lambda: None

    assert SlackMessage.objects.get().state == State.TO_UPDATE
    assert deliver_slack() == 1
    assert "Approved by reviewer" in text_of(slack.only_message())
    assert SlackMessage.objects.get().state == State.DONE


HOSTILE = "<!channel> <https://evil.example/|Approve here> & <@U0BOSS> *now*"


def mrkdwn_objects(message: dict) -> list[dict]:
    """Every mrkdwn text object of a message's blocks."""
    found = []
    for block in message["blocks"]:
        found += [block["text"]] if "text" in block else []
        found += block.get("fields", []) + block.get("elements", [])
    return [each for each in found if each.get("type") == "mrkdwn"]


def test_agent_text_mentions_no_one_and_links_nowhere(slack, propose, session):
    """An agent that writes Slack's markup (a mention of the whole channel, a link
    disguised as a button's words, a person's mention) has it shown as the characters it
    wrote, in the operation's and the request's messages and in the notification text
    Slack shows outside the channel."""
    hostile_run = start_run(session=session, goal=f"Pay {HOSTILE}", actor=AGENT)
    propose("call-1", target=hostile_run, summary=f"Summary {HOSTILE}")
    ask(run=hostile_run, prompt=f"Ship? {HOSTILE}", actor=AGENT, kind="question")

    assert deliver_slack() == 2

    escaped = "&lt;!channel&gt; &lt;https://evil.example/|Approve here&gt; &amp; &lt;@U0BOSS&gt;"
    for message in slack.messages.values():
        shown = json.dumps(message, ensure_ascii=False)
        assert "<!channel>" not in shown and "<https://evil" not in shown
        assert "<@U0BOSS>" not in shown
        assert escaped in text_of(message) or escaped in message["text"]
        assert all(each.get("verbatim") is True for each in mrkdwn_objects(message))


def test_a_target_that_hangs_holds_its_own_message_only(slack, propose, settings):
    """Making a message reads the preview from the live target. One whose target never
    answers is posted after the preview's budget (3 s), its preview saying so, and the
    message beside it in the same round waits no longer than that."""
    target = Hanging()
    settings.OVERSIGHT_HTTP_ALLOWED_HOSTS = [*settings.OVERSIGHT_HTTP_ALLOWED_HOSTS, target.host]
    stuck = propose(
        "call-1",
        action="http.request",
        arguments=http_arguments(f"http://{target.host}"),
        rollback_kind=Operation.RollbackKind.OUT_OF_BAND,
    )
    fine = propose("call-2")
    try:
        started = time.monotonic()
        assert deliver_slack() == 2
        took = time.monotonic() - started
    finally:
        target.close()

    assert took < PREVIEW_BUDGET.seconds + 2
    shown = {message.operation_id: message.ts for message in SlackMessage.objects.all()}
    assert "did not finish answering within 3 s" in text_of(slack.messages[shown[stuck.pk]])
    assert "A → B: 100" in text_of(slack.messages[shown[fine.pk]])
