"""Slack as a real app (#36 item 1), against a fake of Slack on loopback: what waits is
posted to the project's channel with its effect and buttons; a linked reviewer's press
decides through the same rules as the page, its checkpoint naming Slack; the message
then says who decided; a press by the proposer's owner, an auditor, an unlinked user, a
user who lost the role, with a forged signature or an old timestamp decides nothing."""

import re
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core import signing
from django.core.management import CommandError, call_command

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
    SlackMessage,
)
from runs.services.decisions import expire_due_operations
from runs.services.requests import ask
from tests.conftest import AGENT
from tests.fake_slack import BOT_TOKEN, CHANNEL, SIGNING_SECRET, TEAM, FakeSlack, buttons, text_of
from tests.helpers import decide_on

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


def test_an_unlinked_user_is_offered_a_link_that_links_them_once(
    slack, propose, client, reviewer, reviewer2
):
    operation = propose("call-1")
    button = buttons(posted(slack))["Approve"]

    slack.press(client, button, "U0NEWCOMER")

    [offer] = slack.replies()
    assert offer.startswith("Your Slack user is not linked to an Oversight account")
    assert Operation.objects.get(pk=operation.pk).status == Operation.Status.PROPOSED
    url = re.search(r"<https?://[^/]+(/account/slack/[^|]+/)\|Link it>", offer).group(1)
    client.force_login(reviewer)
    assert "Slack user <code>U0NEWCOMER</code>" in client.get(url).text
    assert client.post(url).status_code == 302
    identity = SlackIdentity.objects.get()
    assert (identity.user, identity.team, identity.slack_user) == (reviewer, TEAM, "U0NEWCOMER")
    client.force_login(reviewer2)
    assert client.post(url).status_code == 409  # Already someone's.

    slack.press(client, button, "U0NEWCOMER")

    assert slack.replies(2)[1] == f"You approved operation {operation.pk}."


def test_a_forged_or_old_link_links_nothing(client, reviewer, slack):
    client.force_login(reviewer)
    forged = signing.dumps({"team": TEAM, "user": "U0X"}, salt="another.purpose")
    assert client.post(f"/account/slack/{forged}/").status_code == 400
    assert not SlackIdentity.objects.exists()


@pytest.mark.parametrize(
    ("signing", "why"),
    [
        ({"secret": "not-the-signing-secret"}, "The signature is not Slack's."),
        ({"age": 301}, "The timestamp is missing or too old."),
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


def test_connect_slack_refuses_without_the_apps_settings(project):
    with pytest.raises(CommandError, match="Slack is not set up"):
        call_command("connect_slack", "--project", "acme", "--channel", "C0NEWS")
    assert not SlackChannel.objects.exists()


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
