"""Slack direct messages (#36 item 3), against the fake Slack on loopback: a reviewer who
chose them on /account/ and linked their Slack user gets each operation or request that
waits for their decision in their conversation with the app, with the channel message's
buttons, held through their quiet hours; a press there decides as a press in the channel
does; a decision anywhere says so in every message, and one never posted stays so."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.clock import db_now
from runs.engine.slack import close_ended, deliver_slack
from runs.models import (
    Checkpoint,
    Decision,
    Operation,
    Preferences,
    Role,
    SlackChannel,
    SlackIdentity,
    SlackMessage,
)
from runs.services.decisions import expire_due_operations
from runs.services.requests import ask
from tests.conftest import AGENT, make_user
from tests.fake_slack import CHANNEL, buttons, conversation, text_of
from tests.helpers import decide_on
from tests.test_quiet_hours import MADRID, at, day_ahead, quiet
from tests.test_slack import linked, slack  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)  # The lane's threads read the rows.
State = SlackMessage.State
DIRECT = "U0REVIEWER"


def chose_direct(user, slack_user: str | None = None, *, on: bool = True) -> None:
    """``user`` chose Slack direct messages (or not), their Slack user linked if given."""
    Preferences.objects.update_or_create(user=user, defaults={"slack_direct": on})
    if slack_user:
        linked(user, slack_user)


def posts_to(fake, channel: str) -> list[dict]:
    return [body for body in fake.called("chat.postMessage") if body["channel"] == channel]


@pytest.fixture
def dm_reviewer(reviewer):
    """The reviewer, linked to ``DIRECT``, who chose direct messages."""
    chose_direct(reviewer, DIRECT)
    return reviewer


@pytest.fixture
def no_channel(slack):  # noqa: F811 (the fixture, used)
    """Slack set up, and the project connected to no channel."""
    SlackChannel.objects.all().delete()
    return slack


def test_only_a_linked_reviewer_who_chose_them_gets_a_direct_message_with_the_buttons(
    slack,  # noqa: F811
    propose,
    dm_reviewer,
    reviewer2,
    owner,
    auditor,
    project,
):
    chose_direct(reviewer2, "U0DIDNOTCHOOSE", on=False)
    chose_direct(owner, "U0OWNER")  # Owns the run: may not decide it.
    chose_direct(auditor, "U0AUDITOR")  # Decides nothing.
    chose_direct(make_user("unlinked", project, Role.REVIEWER))
    operation = propose("call-1")

    assert deliver_slack() == 2

    [in_channel] = posts_to(slack, CHANNEL)
    [direct] = posts_to(slack, DIRECT)
    assert len(slack.called("chat.postMessage")) == 2
    assert direct["blocks"] == in_channel["blocks"]
    approve = buttons(direct)["Approve"]
    assert approve["value"].startswith(f"operation:{operation.pk}:{operation.arguments_hash}:")
    assert set(buttons(direct)) == {"Approve", "Reject…"}
    message = SlackMessage.objects.get(recipient=dm_reviewer)
    assert (message.state, message.channel) == (State.POSTED, conversation(DIRECT))


def test_approved_from_the_direct_message_both_messages_say_who_approved(
    slack,  # noqa: F811
    propose,
    client,
    dm_reviewer,
):
    operation = propose("call-1")
    deliver_slack()
    [direct] = posts_to(slack, DIRECT)

    slack.press(client, buttons(direct)["Approve"], DIRECT)

    assert slack.replies() == [f"You approved operation {operation.pk}."]
    operation.refresh_from_db()
    assert operation.status == Operation.Status.APPROVED
    assert Decision.objects.get(operation=operation).reviewer == dm_reviewer
    checkpoint = Checkpoint.objects.get(to_status=Operation.Status.APPROVED)
    assert checkpoint.state["decision"]["via"] == "slack"
    assert deliver_slack() == 2
    updated = {body["channel"]: body for body in slack.called("chat.update")}
    assert set(updated) == {CHANNEL, conversation(DIRECT)}
    for message in updated.values():
        assert "Approved by reviewer" in text_of(message) and buttons(message) == {}
    assert set(SlackMessage.objects.values_list("state", flat=True)) == {State.DONE}


def test_quiet_hours_hold_a_direct_message_until_they_end(
    no_channel, propose, dm_reviewer, reviewer2
):
    """Without a channel connected too; the other reviewer's own hours hold nothing."""
    Preferences.objects.filter(user=dm_reviewer).delete()
    quiet(dm_reviewer, MADRID, "22:00", "07:00")
    chose_direct(dm_reviewer)
    chose_direct(reviewer2, "U0REVIEWER2")
    day = day_ahead(MADRID)
    operation = propose("call-1")

    assert deliver_slack(at(day, "23:30", MADRID)) == 1
    assert [body["channel"] for body in no_channel.called("chat.postMessage")] == ["U0REVIEWER2"]
    assert deliver_slack(at(day, "06:59", MADRID, days=1)) == 0

    assert deliver_slack(at(day, "07:00", MADRID, days=1)) == 1
    [direct] = posts_to(no_channel, DIRECT)
    assert buttons(direct)["Approve"]["value"].startswith(f"operation:{operation.pk}:")


def test_an_item_decided_in_its_recipients_quiet_hours_is_never_posted_to_them(
    no_channel, propose, dm_reviewer, reviewer2
):
    Preferences.objects.filter(user=dm_reviewer).delete()
    quiet(dm_reviewer, MADRID, "22:00", "07:00")
    chose_direct(dm_reviewer)
    day = day_ahead(MADRID)
    operation = propose("call-1")
    assert deliver_slack(at(day, "23:30", MADRID)) == 0

    decide_on(operation, reviewer2)

    assert deliver_slack(at(day, "07:00", MADRID, days=1)) == 0
    assert no_channel.called("chat.postMessage") == []
    assert SlackMessage.objects.get().state == State.DONE


@pytest.mark.parametrize("ended", ["decided on its page", "expired"])
def test_a_posted_direct_message_says_how_its_item_ended(
    no_channel, propose, dm_reviewer, reviewer2, ended
):
    operation = propose("call-1")
    assert deliver_slack() == 1
    if ended == "decided on its page":
        decide_on(operation, reviewer2, "reject", comment="Not this week")
        said = "Rejected by reviewer2: Not this week"
    else:
        assert expire_due_operations(operation.expires_at + timedelta(minutes=1)) == 1
        assert close_ended() == 1
        said = "No longer waits: it is expired"

    assert deliver_slack(db_now() + timedelta(days=2)) == 1

    [update] = no_channel.called("chat.update")
    assert update["channel"] == conversation(DIRECT) and said in text_of(update)
    assert buttons(update) == {}


def test_each_operation_in_a_row_gets_its_own_direct_message(
    no_channel, propose, client, dm_reviewer
):
    first = propose("call-1")
    assert deliver_slack() == 1
    second = propose("call-2")
    assert deliver_slack() == 1

    directs = posts_to(no_channel, DIRECT)
    values = [buttons(direct)["Approve"]["value"] for direct in directs]
    assert [value.split(":")[1] for value in values] == [str(first.pk), str(second.pk)]
    for direct in directs:
        no_channel.press(client, buttons(direct)["Approve"], DIRECT)
    assert len(no_channel.replies(2)) == 2
    statuses = set(Operation.objects.values_list("status", flat=True))
    assert statuses == {Operation.Status.APPROVED}


def test_a_choice_request_is_a_direct_message_with_its_choices(
    no_channel,
    run,
    dm_reviewer,
):
    ask(run=run, prompt="Which region?", choices=["eu-west-1", "us-east-1"], actor=AGENT)

    assert deliver_slack() == 1

    [direct] = posts_to(no_channel, DIRECT)
    assert set(buttons(direct)) == {"eu-west-1", "us-east-1", "Reject…"}


@pytest.mark.parametrize("since", ["turned them off", "unlinked", "lost the role", "left"])
def test_a_direct_message_goes_to_no_one_who_stopped_wanting_it_before_it_was_posted(
    no_channel, propose, dm_reviewer, project, since
):
    propose("call-1")
    if since == "turned them off":
        chose_direct(dm_reviewer, on=False)
    elif since == "unlinked":
        SlackIdentity.objects.filter(user=dm_reviewer).delete()
    elif since == "lost the role":
        project.memberships.filter(user=dm_reviewer).delete()
    else:
        dm_reviewer.is_active = False
        dm_reviewer.save()

    assert deliver_slack() == 0

    assert no_channel.called("chat.postMessage") == []
    assert SlackMessage.objects.get().state == State.DONE


def test_without_slack_set_up_no_direct_message_is_recorded(propose, reviewer):
    chose_direct(reviewer, DIRECT)
    propose("call-1")
    assert not SlackMessage.objects.exists() and deliver_slack() == 0


def test_a_proposal_costs_the_same_queries_however_many_get_direct_messages(
    no_channel, propose, project, dm_reviewer
):
    def queries(call_id: str) -> int:
        with CaptureQueriesContext(connection) as captured:
            propose(call_id)
        return len(captured)

    propose("call-1")  # The run waits from now on: the next proposals go alike.
    one = queries("call-2")
    for number in range(3):
        chose_direct(make_user(f"more{number}", project, Role.REVIEWER), f"U0MORE{number}")
    more = queries("call-3")

    assert one == more
    assert SlackMessage.objects.filter(operation__call_id="call-3").count() == 4


def test_the_account_page_saves_the_choice_and_says_when_nothing_would_be_sent(
    slack,  # noqa: F811
    client,
    reviewer,
    settings,
):
    client.force_login(reviewer)
    chosen = {"time_zone": "UTC", "notify_pending": "on", "slack_direct": "on"}

    assert "Yours is not linked" in client.get("/account/").text
    assert client.post("/account/", chosen).status_code == 302
    assert Preferences.objects.get(user=reviewer).slack_direct
    linked(reviewer, DIRECT)
    page = client.get("/account/").text
    assert re.search(r'<input type="checkbox" name="slack_direct"[^>]* checked', page)
    assert "Yours is not linked" not in page
    assert client.post("/account/", {"time_zone": "UTC"}).status_code == 302
    assert not Preferences.objects.get(user=reviewer).slack_direct
    settings.OVERSIGHT_SLACK_BOT_TOKEN = ""
    assert "Slack is not set up on this Oversight" in client.get("/account/").text
