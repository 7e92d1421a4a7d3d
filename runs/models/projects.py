import json

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, validate_email
from django.db import models

from runs.models.choices import Risk


class Role(models.TextChoices):
    """Each role is a Django group with permissions; membership scopes it to a project."""

    REVIEWER = "reviewer"
    AUDITOR = "auditor"
    ADMIN = "admin"


class Project(models.Model):
    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=200)
    alerts_pause_agent = models.BooleanField(
        default=False,
        help_text="While an alert is open on one of an agent's runs, that agent's other "
        "runs in this project take no new proposals or claims.",
    )
    history_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Finished runs older than this many days are archived and pruned by "
        "archive_history",
    )
    alert_emails = models.JSONField(
        default=list,
        db_default=[],
        blank=True,
        help_text="Addresses told of every alert of this project, besides its admins "
        "(e.g. an on-call list): a JSON list.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        permissions = [("manage_project", "Can manage members, policies and agent tokens")]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(history_days__isnull=True) | models.Q(history_days__gte=1),
                name="project_history_days_positive",
            )
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        emails = self.alert_emails
        if not isinstance(emails, list) or not all(isinstance(e, str) for e in emails):
            raise ValidationError({"alert_emails": "A list of email addresses."})
        for email in emails:
            try:
                validate_email(email)
            except ValidationError:
                raise ValidationError(
                    {"alert_emails": f"{email!r} is not an email address."}
                ) from None


class Membership(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="memberships")
    # Granted by the identity provider's claims at single sign-on, and taken back at the
    # next sign-in whose claims no longer grant it (oversight/single_sign_on.py). A
    # membership an admin gave by hand is never touched by a sign-in.
    from_sign_in = models.BooleanField(
        db_default=False,
        help_text="Granted by the sign-in provider's groups; replaced at each sign-in.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "user", "role"], name="membership_unique_role"
            )
        ]
        indexes = [models.Index(fields=["user", "project"], name="membership_user_idx")]

    def __str__(self) -> str:
        return f"{self.user} is {self.role} in {self.project}"


class ApprovalPolicy(models.Model):
    """A rule for an action in a project: the minimum risk and how many people must
    approve, optionally only when an argument passes a test (``amount`` ``gt`` 1000).
    A blank action is the project's default. The agent can raise risk, never lower
    it; high-risk operations need two approvers whatever the rule says
    (``runs.policies``)."""

    class Operator(models.TextChoices):
        GT = "gt", ">"
        GTE = "gte", "≥"
        LT = "lt", "<"
        LTE = "lte", "≤"
        EQ = "eq", "="
        NE = "ne", "≠"

    # Operators that order their operands: they compare numbers only.
    ORDERING = (Operator.GT, Operator.GTE, Operator.LT, Operator.LTE)

    class Approvals(models.IntegerChoices):
        AUTO = 0, "auto-approve"
        ONE = 1, "one approver"
        TWO = 2, "two approvers"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="policies")
    action = models.CharField(max_length=100, blank=True, help_text="Blank: every action.")
    when_argument = models.CharField(
        max_length=200,
        blank=True,
        help_text="An argument, dotted for nested ones (e.g. 'amount'). Blank: always.",
    )
    when_operator = models.CharField(max_length=3, choices=Operator.choices, blank=True)
    when_value = models.JSONField(null=True, blank=True)
    min_risk = models.CharField(
        max_length=8, choices=Risk.choices, blank=True, help_text="Blank: the agent's risk."
    )
    approvals_required = models.PositiveSmallIntegerField(
        choices=Approvals.choices, default=Approvals.ONE
    )
    decision_timeout = models.DurationField(
        null=True, blank=True, help_text="How long a proposal waits for a decision."
    )
    approval_ttl = models.DurationField(
        null=True, blank=True, help_text="How long an approval stays valid for execution."
    )

    class Meta:
        verbose_name_plural = "approval policies"
        constraints = [
            models.UniqueConstraint(
                fields=["project", "action"],
                condition=models.Q(when_argument=""),
                name="policy_unique_action",
            ),
            models.CheckConstraint(
                condition=(models.Q(when_argument="") & models.Q(when_operator=""))
                | (~models.Q(when_argument="") & ~models.Q(when_operator="")),
                name="policy_condition_complete",
            ),
            models.CheckConstraint(
                condition=models.Q(min_risk="") | models.Q(min_risk__in=Risk.values),
                name="policy_min_risk_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(approvals_required__lte=2), name="policy_approvals_range"
            ),
        ]

    def __str__(self) -> str:
        action = self.action or "any action"
        when = f" when {self.condition}" if self.when_argument else ""
        return f"{self.project}: {action}{when} → {self.get_approvals_required_display()}"

    def clean(self) -> None:
        """What the database constraints cannot say in words, said per field."""
        errors = {}
        if self.when_argument and not self.when_operator:
            errors["when_operator"] = "A condition on an argument needs an operator."
        if self.when_operator and not self.when_argument:
            errors["when_argument"] = "An operator needs the argument it tests."
        if self.when_argument and "" in self.when_argument.split("."):
            errors["when_argument"] = "An argument name, dotted for nested ones: 'to.account'."
        if not self.when_argument and self.when_value is not None:
            errors["when_value"] = "A value is compared only in a condition: name an argument."
        elif self.when_operator in self.ORDERING and not _is_number(self.when_value):
            errors["when_value"] = (
                f"'{self.get_when_operator_display()}' compares numbers: enter one."
            )
        try:
            json.dumps(self.when_value, allow_nan=False)
        except ValueError:
            errors["when_value"] = "NaN and Infinity are not JSON values."
        if errors:
            raise ValidationError(errors)

    @property
    def condition(self) -> str:
        """The test as a person reads it: ``amount > 1000``; blank for an unconditional rule."""
        if not self.when_argument:
            return ""
        value = json.dumps(self.when_value, ensure_ascii=False)
        return f"{self.when_argument} {self.get_when_operator_display()} {value}"


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
