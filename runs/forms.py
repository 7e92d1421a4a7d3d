"""Forms for people: deciding, cancelling, resolving alerts, filtering lists, and
preferences. They validate shape; the services enforce the rules and their refusals
are shown as form errors."""

import zoneinfo

from django import forms
from django.conf import settings
from django.contrib.auth import authenticate
from django.contrib.auth import forms as auth_forms
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.text import capfirst

from runs import jsonsafe
from runs.actions.registry import check_proposal
from runs.errors import InvalidInput
from runs.models import Decision, HumanRequest, Operation, Preferences, Project, Run

IRREVERSIBLE = (Operation.RollbackKind.NONE, Operation.RollbackKind.OUT_OF_BAND)


class DecisionForm(forms.Form):
    kind = forms.ChoiceField(choices=Decision.Kind.choices, widget=forms.HiddenInput)
    arguments_hash = forms.CharField(widget=forms.HiddenInput)
    # The hash of the effect's preview the reviewer is shown ("" for none).
    preview_hash = forms.CharField(required=False, widget=forms.HiddenInput)
    comment = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}))
    arguments = forms.CharField(
        required=False,
        label="Arguments (JSON)",
        widget=forms.Textarea(attrs={"rows": 14, "spellcheck": "false", "class": "code"}),
    )
    confirm = forms.CharField(required=False, label="Type the action name to confirm")

    def __init__(self, *args, operation: Operation, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.operation = operation

    @property
    def kind_label(self) -> str:
        return Decision.Kind(self.initial.get("kind") or self.data.get("kind")).label.capitalize()

    @property
    def needs_confirmation(self) -> bool:
        return self.operation.rollback_kind in IRREVERSIBLE

    def clean_arguments(self):
        if self.data.get("kind") != Decision.Kind.EDIT:
            return None
        return edited_arguments(self.cleaned_data["arguments"])

    def clean(self):
        data = super().clean()
        kind = data.get("kind")
        if (
            kind in (Decision.Kind.REJECT, Decision.Kind.REPLY)
            and not data.get("comment", "").strip()
        ):
            self.add_error(
                "comment",
                "Say why you reject it." if kind == Decision.Kind.REJECT else "Write the reply.",
            )
        if (
            kind in Decision.APPROVING
            and self.needs_confirmation
            and data.get("confirm", "").strip() != self.operation.action
        ):
            self.add_error(
                "confirm",
                f"This cannot be undone: type {self.operation.action} to confirm.",
            )
        return data


def edited_arguments(text: str | None) -> dict:
    """A reviewer's edited arguments, parsed from their JSON, within the limits an
    agent's proposal meets: no NaN, lone surrogate, deep nesting or size that a
    proposal could not have had."""
    try:
        value = jsonsafe.parse(text or "", field="arguments")
        jsonsafe.check_json(
            "arguments", value, max_bytes=settings.OVERSIGHT_API_MAX_ARGUMENTS_BYTES
        )
    except jsonsafe.Refused as error:
        where = "" if error.field == "arguments" else f"{error.field}: "
        raise forms.ValidationError(f"{where}{capfirst(str(error))}") from None
    if not isinstance(value, dict):
        raise forms.ValidationError("The arguments must be a JSON object.")
    return value


class EditForm(forms.Form):
    """The first step of an edit: the arguments as the reviewer changed them, checked
    as a proposal of the operation's action would be, on the arguments they started
    from. Nothing is decided: the page then shows what the edit would change, and the
    reviewer approves that (a ``DecisionForm`` of kind edit)."""

    arguments_hash = forms.CharField(widget=forms.HiddenInput)
    arguments = forms.CharField(
        label="Arguments (JSON)",
        strip=False,
        widget=forms.Textarea(attrs={"rows": 14, "spellcheck": "false", "class": "code"}),
    )

    def __init__(self, *args, operation: Operation, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.operation = operation

    def clean_arguments(self) -> dict:
        value = edited_arguments(self.cleaned_data["arguments"])
        try:
            check_proposal(self.operation.action, value, self.operation.rollback_kind)
        except InvalidInput as error:
            raise forms.ValidationError(str(error).split("; ")) from None
        return value

    def clean(self):
        data = super().clean()
        operation = self.operation
        if operation.status != Operation.Status.PROPOSED:
            raise forms.ValidationError(
                f"Operation {operation.pk} is {operation.get_status_display()}; "
                "it no longer awaits a decision."
            )
        if data.get("arguments_hash") != operation.arguments_hash:
            raise forms.ValidationError(
                f"Operation {operation.pk} has other arguments than the ones you edited: "
                "look again."
            )
        return data


class AnswerForm(forms.Form):
    """A reviewer's answer to a human request: what it allows (``allowed_kinds``), the
    data for a schema (JSON, or plain text when the schema asks for a string), the
    choice for choices. The service checks the data against the schema. (The answer
    is the field ``value``: a form's ``data`` is its bound input.)"""

    kind = forms.ChoiceField(choices=HumanRequest.AnswerKind.choices, widget=forms.HiddenInput)
    version = forms.IntegerField(widget=forms.HiddenInput)
    value = forms.CharField(required=False, strip=False, label="Your answer")
    choice = forms.CharField(required=False, max_length=200, strip=False)
    comment = forms.CharField(
        required=False, max_length=4000, widget=forms.Textarea(attrs={"rows": 2})
    )

    def __init__(self, *args, request: HumanRequest, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.request = request
        if self.text_answer:
            self.fields["value"].widget = forms.Textarea(attrs={"rows": 3})
        else:
            self.fields["value"].label = "Your answer (JSON)"
            self.fields["value"].widget = forms.Textarea(
                attrs={"rows": 8, "spellcheck": "false", "class": "code"}
            )

    @property
    def text_answer(self) -> bool:
        """The schema asks for a string: the reviewer types text, not JSON."""
        schema = self.request.answer_schema
        return isinstance(schema, dict) and schema.get("type") == "string"

    def clean_value(self):
        if self.data.get("kind") != HumanRequest.AnswerKind.ANSWER:
            return None
        text = self.cleaned_data["value"]
        try:
            value = text if self.text_answer else jsonsafe.parse(text or "", field="value")
            jsonsafe.check_json(
                "value", value, max_bytes=settings.OVERSIGHT_API_MAX_ARGUMENTS_BYTES
            )
        except jsonsafe.Refused as error:
            raise forms.ValidationError(capfirst(str(error))) from None
        return value

    def clean(self):
        data = super().clean()
        kind = data.get("kind")
        if kind == HumanRequest.AnswerKind.REJECT and not data.get("comment", "").strip():
            self.add_error("comment", "Say why you reject it.")
        if kind == HumanRequest.AnswerKind.CHOOSE and not data.get("choice"):
            self.add_error(None, "Choose one of the options.")
        return data

    def answer(self):
        """The answer's data as the service takes it: the choice, or the data."""
        if self.cleaned_data["kind"] == HumanRequest.AnswerKind.CHOOSE:
            return self.cleaned_data["choice"]
        return self.cleaned_data.get("value")


class ReasonForm(forms.Form):
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), max_length=2000)


class ResolveForm(forms.Form):
    note = forms.CharField(
        label="Resolution note", widget=forms.Textarea(attrs={"rows": 3}), max_length=4000
    )


def project_choices(projects: QuerySet[Project]) -> list[tuple[str, str]]:
    return [("", "All projects"), *((p.slug, p.name) for p in projects)]


class QueueFilter(forms.Form):
    project = forms.ChoiceField(required=False)
    action = forms.CharField(required=False, max_length=100)
    risk = forms.ChoiceField(required=False, choices=[("", "Any risk"), *Operation.Risk.choices])
    # Not a field of the filter form: a new filter starts again at the first page.
    page = forms.IntegerField(required=False, min_value=1, max_value=100_000)

    def __init__(self, *args, projects: QuerySet[Project], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["project"].choices = project_choices(projects)


class RunFilter(forms.Form):
    status = forms.ChoiceField(required=False, choices=[("", "Any status"), *Run.Status.choices])
    reason = forms.ChoiceField(
        required=False,
        label="Waiting for",
        choices=[("", "Any reason"), *Run.Reason.choices[1:]],
    )
    project = forms.ChoiceField(required=False)
    agent = forms.CharField(required=False, max_length=200)
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))

    def __init__(self, *args, projects: QuerySet[Project], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["project"].choices = project_choices(projects)


class PreferencesForm(forms.ModelForm):
    time_zone = forms.ChoiceField(choices=[(z, z) for z in sorted(zoneinfo.available_timezones())])

    class Meta:
        model = Preferences
        fields = ["time_zone", "notify_pending", "shortcuts"]

    def save(self, commit: bool = True) -> Preferences:
        """Writes the person's own fields only: the row also holds the claim on their
        next email, which a worker may have taken since the page read the row; writing
        it back as read would free the claim, and another worker would send the email
        again."""
        preferences = super().save(commit=False)
        if commit:
            preferences.save(update_fields=self.Meta.fields)
        return preferences


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="For example the agent's name.")
    owner = forms.ChoiceField(
        required=False,
        label="Acts for",
        help_text="The member whose runs these are; they cannot approve what it proposes. "
        "Or a new user named after the token, who only reads and never signs in.",
    )

    def __init__(self, *args, members: QuerySet, **kwargs) -> None:
        """``members``: the project's users, the only people a token may act for."""
        super().__init__(*args, **kwargs)
        self.fields["owner"].choices = [
            ("", "A new user named after the token"),
            *((username, username) for username in members.values_list("username", flat=True)),
        ]


class PasswordChangeForm(auth_forms.PasswordChangeForm):
    """Changing one's password asks for the current one through ``authenticate``, so
    the sign-in throttle counts a wrong guess: a session left open must not become a
    way to guess the password without limit."""

    def __init__(self, user, *args, request: HttpRequest, **kwargs) -> None:
        super().__init__(user, *args, **kwargs)
        self.request = request

    def clean_old_password(self) -> str:
        old_password = self.cleaned_data["old_password"]
        username = self.user.get_username()
        if authenticate(self.request, username=username, password=old_password) is None:
            raise forms.ValidationError(
                self.error_messages["password_incorrect"], code="password_incorrect"
            )
        return old_password
