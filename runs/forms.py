"""Forms for people: deciding, cancelling, resolving alerts, filtering lists, and
preferences. They validate shape; the services enforce the rules and their refusals
are shown as form errors."""

import zoneinfo
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.auth import authenticate
from django.contrib.auth import forms as auth_forms
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.text import capfirst

from runs import jsonsafe
from runs.actions.registry import check_proposal
from runs.answer_fields import answer_fields
from runs.errors import InvalidInput
from runs.models import (
    Decision,
    HumanRequest,
    Operation,
    Preferences,
    Project,
    Run,
    SlackIdentity,
    WebhookEvent,
)
from runs.models.operations import IRREVERSIBLE
from runs.services.requests import TEXT_ANSWER_CHARS, allowed_kinds

# The one box of a rejection, on an operation's page and on a request's: the agent
# reads the reason (#34), and the database refuses a rejection without one.
REASON_LABEL = "Reason (required): the agent reads it"
REJECTING = (Decision.Kind.REJECT, Decision.Kind.REPLY)


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
    def comment_label(self) -> str:
        rejecting = (self.initial.get("kind") or self.data.get("kind")) == Decision.Kind.REJECT
        return REASON_LABEL if rejecting else "Comment (optional)"

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
        if kind in REJECTING and not data.get("comment", "").strip():
            # A reply (a rejection posted by a script, or by a page from before the one
            # Reject) has no box on the page: its error is said above the forms.
            field = "comment" if kind == Decision.Kind.REJECT else None
            self.add_error(field, "Say why you reject it.")
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
    """One way to answer a human request, named by ``using`` (a hidden input, so that
    the page knows which of its forms came back); the subclasses add what the answer
    holds. The service checks it (the kind fits the request, the choice is one of its
    own, the data is valid against its schema) and its refusals come back as errors on
    the field at fault (``field_of``). (The answer is ``answer()``: a form's ``data`` is
    its bound input.)"""

    using = ""
    posts = ""  # The kind of answer it posts; by default the request's way to accept.
    summary = ""  # Folded under this summary, when it is not the request's way to accept.
    kind = forms.ChoiceField(choices=HumanRequest.AnswerKind.choices, widget=forms.HiddenInput)
    version = forms.IntegerField(widget=forms.HiddenInput)
    comment = forms.CharField(
        required=False,
        max_length=4000,
        label="Comment (optional)",
        widget=forms.Textarea(attrs={"rows": 2}),
    )

    def __init__(self, *args, request: HumanRequest, **kwargs) -> None:
        super().__init__(*args, auto_id=f"{self.using}-%s", **kwargs)
        self.request = request
        self.fields["version"].initial = request.version
        self.fields["kind"].initial = self.posts or allowed_kinds(request)[0]

    def clean(self):
        data = super().clean()
        rejected = data.get("kind") == HumanRequest.AnswerKind.REJECT
        if rejected and not data.get("comment") and "comment" not in self.errors:
            self.add_error(self.field_of("comment:"), "Say why you reject it.")
        return data

    def answer(self) -> Any:
        """The answer's data as the service takes it: none, unless a subclass has one."""
        return None

    def field_of(self, problem: str) -> str | None:
        """Where the service's ``problem`` belongs on the form; None: above it (a form
        posted with a kind it does not offer has no field for it)."""
        if problem.startswith("comment:") and "comment" in self.fields:
            return "comment"
        return None

    def refuse(self, problem: str) -> None:
        """Show the service's ``problem`` where it belongs."""
        self.add_error(self.field_of(problem), problem)

    def errors_above(self) -> list[str]:
        """The errors of no field the reviewer sees: the form's own, and its hidden
        fields' (a post that is not the page's)."""
        hidden = [f"{f.name}: {error}" for f in self.hidden_fields() for error in f.errors]
        return [*self.non_field_errors(), *hidden]

    def focus_first_error(self) -> None:
        """The page comes back with the focus on what to fix."""
        for name, field in self.fields.items():
            if name in self.errors and not field.widget.is_hidden:
                field.widget.attrs["autofocus"] = True
                return


class SignOffForm(AnswerForm):
    """A sign-off: Sign off, with an optional comment. Rejecting it is the ``RejectForm``
    beside it, with a box of its own for the reason: a box shared by both would put
    Sign off right after the reason, where r, the reason, Tab and Enter (the habit of
    rejecting an operation) would sign it off."""

    using = "sign_off"


class RejectForm(AnswerForm):
    """Refusing what the request asks, with a reason the agent reads."""

    using = "reject"
    summary = "Reject"
    posts = HumanRequest.AnswerKind.REJECT

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        comment = self.fields["comment"]
        comment.label, comment.required = REASON_LABEL, True
        comment.error_messages["required"] = "Say why you reject it."


class ChoiceForm(AnswerForm):
    """A choice: one button per choice, each posting its own."""

    using = "choose"
    choice = forms.CharField(required=False, max_length=200, strip=False, widget=forms.HiddenInput)

    def clean(self):
        data = super().clean()
        if data.get("kind") == HumanRequest.AnswerKind.CHOOSE and not data.get("choice"):
            self.add_error(None, "Choose one of the options.")
        return data

    def answer(self) -> Any:
        return self.cleaned_data["choice"]


class BoxAnswerForm(AnswerForm):
    """An answer typed in one box, ``value``: what the service finds wrong with the
    data belongs there."""

    def answer(self) -> Any:
        return self.cleaned_data["value"]

    def field_of(self, problem: str) -> str | None:
        return "value" if problem.startswith("data") else super().field_of(problem)


class TextAnswerForm(BoxAnswerForm):
    """A question: the answer is the text the reviewer writes, nothing besides."""

    using = "text"
    value = forms.CharField(
        max_length=TEXT_ANSWER_CHARS,
        label="Your answer",
        widget=forms.Textarea(attrs={"rows": 4}),
        error_messages={"required": "Write your answer."},
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        del self.fields["comment"]


class JsonAnswerForm(BoxAnswerForm):
    """Data typed as JSON: the way to answer a schema that fields cannot draw."""

    using = "json"
    field_order = ["value"]
    value = forms.CharField(
        strip=False,
        label="Your answer (JSON)",
        widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false", "class": "code"}),
        error_messages={"required": "Write the answer as JSON."},
    )

    def clean_value(self) -> Any:
        try:
            value = jsonsafe.parse(self.cleaned_data["value"], field="value")
            jsonsafe.check_json(
                "value", value, max_bytes=settings.OVERSIGHT_API_MAX_ARGUMENTS_BYTES
            )
        except jsonsafe.Refused as error:
            raise forms.ValidationError(capfirst(str(error))) from None
        return value


class JsonAlternativeForm(JsonAnswerForm):
    """The same, folded beside the fields drawn from the schema."""

    summary = "Answer in JSON instead"


class FieldsAnswerForm(AnswerForm):
    """Data in fields drawn from the request's JSON Schema (``runs.answer_fields``); a
    field left empty is left out of the data."""

    using = "fields"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.drawn = answer_fields(self.request.answer_schema, self.request.property_order) or []
        for index, drawn in enumerate(self.drawn):
            self.fields[f"field_{index}"] = drawn.field
        self.order_fields([*self.fields_by_property, "comment"])

    @property
    def intro(self) -> str:
        """The schema's description of the whole object (a value alone has it as help)."""
        described = self.request.answer_schema.get("description")
        alone = self.drawn[0].name is None
        return described if isinstance(described, str) and not alone else ""

    @property
    def fields_by_property(self) -> dict[str, str | None]:
        return {f"field_{index}": drawn.name for index, drawn in enumerate(self.drawn)}

    def clean(self):
        data = super().clean()
        if data.get("kind") == HumanRequest.AnswerKind.ANSWER and not self.errors:
            try:
                jsonsafe.check_json(
                    "data", self.answer(), max_bytes=settings.OVERSIGHT_API_MAX_ARGUMENTS_BYTES
                )
            except jsonsafe.Refused as error:
                raise forms.ValidationError(capfirst(str(error))) from None
        return data

    def answer(self) -> Any:
        values = {name: self.cleaned_data.get(name) for name in self.fields_by_property}
        if len(self.drawn) == 1 and self.drawn[0].name is None:
            return values["field_0"]
        named = self.fields_by_property
        return {named[name]: value for name, value in values.items() if value not in (None, "")}

    def refuse(self, problem: str) -> None:
        """On a field drawn from the schema, the problem without its path: the field
        says where."""
        field = self.field_of(problem)
        said = problem.partition(": ")[2] if field in self.fields_by_property else problem
        self.add_error(field, capfirst(said))

    def field_of(self, problem: str) -> str | None:
        """``data.budget: …`` belongs to the budget's field; ``data: …`` to the one
        field of a value alone, else above the form."""
        path, _, _ = problem.partition(":")
        for name, prop in self.fields_by_property.items():
            alone = prop is None and path == "data"
            if alone or (prop is not None and path.split(".")[:2] == ["data", prop]):
                return name
        return super().field_of(problem)


def answer_forms(request: HumanRequest) -> list[type[AnswerForm]]:
    """The ways to answer ``request``, its way to accept first."""
    Kind = HumanRequest.Kind
    if request.kind == Kind.SIGN_OFF:
        return [SignOffForm, RejectForm]
    if request.kind == Kind.QUESTION:
        return [TextAnswerForm, RejectForm]
    if request.kind == Kind.CHOICE:
        return [ChoiceForm, RejectForm]
    if answer_fields(request.answer_schema) is None:
        return [JsonAnswerForm, RejectForm]
    return [FieldsAnswerForm, JsonAlternativeForm, RejectForm]


def posted_answer(request: HumanRequest, data) -> AnswerForm:
    """The form ``data`` came from (its ``using``): one of the request's, else its way
    to accept, whose service then refuses a kind that does not fit."""
    forms_of = answer_forms(request)
    form = next((form for form in forms_of if form.using == data.get("using")), forms_of[0])
    return form(data, request=request)


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
        fields = [
            "time_zone",
            "notify_pending",
            "slack_direct",
            "quiet_from",
            "quiet_until",
            "shortcuts",
        ]
        # As the browser's time picker sends it, and shows a value it is given.
        widgets = {
            name: forms.TimeInput(attrs={"type": "time"}, format="%H:%M")
            for name in ("quiet_from", "quiet_until")
        }

    def __init__(self, *args, **kwargs) -> None:
        """The Slack box is there whatever its state (a choice kept for when Slack is
        set up or the person linked); its help says when nothing would be sent."""
        super().__init__(*args, **kwargs)
        if why := self._nothing_in_slack():
            field = self.fields["slack_direct"]
            field.help_text = f"{field.help_text} {why}"

    def _nothing_in_slack(self) -> str:
        """Why no direct message would reach this person, or ""."""
        if not settings.OVERSIGHT_SLACK_BOT_TOKEN:
            return "Slack is not set up on this Oversight: nothing is sent there."
        if not SlackIdentity.objects.filter(user_id=self.instance.user_id).exists():
            return "Yours is not linked: nothing is sent until you link it, under Slack below."
        return ""

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
        help_text="The member whose runs these are, once they accept it on their account "
        "page; neither they nor you can approve what it proposes. Or a new user named "
        "after the token, who only reads and never signs in.",
    )

    def __init__(self, *args, members: QuerySet, **kwargs) -> None:
        """``members``: the project's users, the only people a token may act for."""
        super().__init__(*args, **kwargs)
        self.fields["owner"].choices = [
            ("", "A new user named after the token"),
            *((username, username) for username in members.values_list("username", flat=True)),
        ]


class WebhookForm(forms.Form):
    """A new endpoint; the model checks the URL and the events (``WebhookEndpoint.add``)."""

    name = forms.CharField(max_length=100, help_text="Whose tool it is, e.g. “Teams bot”.")
    url = forms.URLField(
        max_length=2000,
        label="URL",
        assume_scheme="https",
        help_text="Where each delivery is POSTed, signed; an internal address only where "
        "OVERSIGHT_HTTP_ALLOWED_HOSTS names it.",
    )
    events = forms.MultipleChoiceField(
        # Named as receivers read them in Oversight-Event, and as the docs name them.
        choices=[(kind, kind) for kind in WebhookEvent.Kind.values],
        widget=forms.CheckboxSelectMultiple,
        help_text="The events it is sent.",
    )


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
