"""Slack, as a real app (#36): a project's channel, the people whose Slack identity is
linked to their account, and one message per operation or request waiting there.

The bot token and the signing secret are settings (``OVERSIGHT_SLACK_BOT_TOKEN``,
``OVERSIGHT_SLACK_SIGNING_SECRET``): the database holds neither. What is stored is
which channel a project posts to, whose Slack user is whom, and, per message, the
``ts`` Slack gave it (the message's id, to update it once the item is decided).
"""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from runs.models.choices import choices_constraint
from runs.models.operations import Operation
from runs.models.projects import Project
from runs.models.requests import HumanRequest


class SlackChannel(models.Model):
    """The Slack channel a project's waiting operations and requests are posted to."""

    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="slack")
    channel = models.CharField(
        max_length=32, help_text="The channel's id, e.g. C0123456789 (the bot must be in it)."
    )

    def __str__(self) -> str:
        return f"{self.project} in Slack {self.channel}"

    @staticmethod
    def is_channel_id(text: str) -> bool:
        """A public (C…) or private (G…) channel's id, as Slack writes them."""
        return text.isalnum() and text[:1] in ("C", "G") and len(text) <= 32


class SlackIdentity(models.Model):
    """A person's Slack user, linked by them (``SlackLinkCode``): their presses in Slack
    act as them, by the same rules as the page."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="slack_identity"
    )
    team = models.CharField(max_length=32)
    slack_user = models.CharField(max_length=32)
    linked_at = models.DateTimeField(db_default=Now())

    class Meta:
        verbose_name_plural = "Slack identities"
        constraints = [
            models.UniqueConstraint(fields=["team", "slack_user"], name="slack_identity_once")
        ]

    def __str__(self) -> str:
        return f"{self.user} is {self.slack_user} in Slack {self.team}"


class SlackLinkCode(models.Model):
    """A one-time code a person gets on their account page and types into Slack's
    dialog, which Slack sends signed with the typing Slack user's id: proof that that
    Slack user is this person. The proof runs from the account to Slack, never the
    other way: a link made in Slack and opened by someone else would let its maker act
    as whoever opened it. Only the code's sha256 is kept, until it is used or expires."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="slack_link_code"
    )
    digest = models.CharField(max_length=64, unique=True)
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"Slack link code of {self.user}"


class SlackMessageState(models.TextChoices):
    TO_POST = "to_post"  # Waits to be posted.
    POSTED = "posted"  # In the channel, with its buttons, while the item waits.
    TO_UPDATE = "to_update"  # The item was decided: the message is to say so.
    DONE = "done"  # Says how it ended; nothing more to do.
    FAILED = "failed"  # Slack refused it every time; the log says why.


class SlackMessage(models.Model):
    """An operation or a request waiting in a project, as a message in Slack: in the
    project's channel (no ``recipient``), or directly to one reviewer who chose it
    (``Preferences.slack_direct``), in their conversation with the app. Recorded in the
    transaction of the proposal (or the question), and marked for update in the
    transaction of the decision; the notification lane posts and updates it
    (``runs.engine.slack``)."""

    State = SlackMessageState

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    # Indexed by the unique constraints below, which lead with them.
    operation = models.ForeignKey(
        Operation,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="slack_messages",
        db_index=False,
    )
    request = models.ForeignKey(
        HumanRequest,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="slack_messages",
        db_index=False,
    )
    # Whom a direct message is for; none for the project's channel.
    recipient = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
    )
    # The channel's id, or a direct message's recipient's Slack user (U…) until Slack
    # answers the post with the conversation's id (D…), which ``chat.update`` needs.
    channel = models.CharField(max_length=32)
    ts = models.CharField(max_length=32, blank=True, default="")
    state = models.CharField(max_length=16, choices=State.choices, default=State.TO_POST)
    # What the message ends saying once decided, e.g. "Approved by ana".
    outcome = models.CharField(max_length=300, blank=True, default="")
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True, db_default=Now())
    last_error = models.TextField(blank=True, default="")

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(operation__isnull=True) ^ Q(request__isnull=True),
                name="slack_message_one_item",
            ),
            choices_constraint("state", SlackMessageState, "slack_message_state_valid"),
            # One message per item in the channel.
            models.UniqueConstraint(
                fields=["operation"],
                condition=Q(recipient__isnull=True),
                name="slack_message_operation_in_channel",
            ),
            models.UniqueConstraint(
                fields=["request"],
                condition=Q(recipient__isnull=True),
                name="slack_message_request_in_channel",
            ),
            # One direct message per item and recipient (a channel's null recipient
            # never conflicts). Also the index of a decision's update of the item's
            # messages (``runs.services.slack.decided``) and of their deletion with it.
            models.UniqueConstraint(
                fields=["operation", "recipient"], name="slack_message_operation_direct"
            ),
            models.UniqueConstraint(
                fields=["request", "recipient"], name="slack_message_request_direct"
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(state__in=["to_post", "to_update"]),
                name="slack_message_due_idx",
            ),
            # The lane's minute: the messages still offering buttons.
            models.Index(
                fields=["id"],
                condition=Q(state="posted"),
                name="slack_message_posted_idx",
            ),
        ]

    def __str__(self) -> str:
        item = (
            f"operation {self.operation_id}" if self.operation_id else f"request {self.request_id}"
        )
        to = f" to user {self.recipient_id}" if self.recipient_id else ""
        return f"Slack message of {item}{to}: {self.state}"

    @property
    def item(self) -> Operation | HumanRequest:
        return self.operation or self.request
