"""The Django admin: projects, members and policies are edited here; everything whose
status belongs to a state machine, and all history, is read-only (status changes go
through the services, which write checkpoints)."""

from django.contrib import admin

from runs.models import (
    AdminCheckpoint,
    Alert,
    AlertDelivery,
    ApprovalPolicy,
    Artifact,
    Checkpoint,
    CheckpointArtifact,
    Decision,
    Membership,
    Message,
    Operation,
    Project,
    ProviderIdentity,
    Run,
    Session,
    SlackChannel,
)


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = True

    def get_readonly_fields(self, request, obj=None):
        return self.fields or [field.name for field in self.model._meta.fields]

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]
    readonly_fields = ["from_sign_in"]  # set by single sign-on only


class SlackChannelInline(admin.StackedInline):
    """The Slack channel the project's waiting work is posted to (the app's token and
    signing secret are settings, never here)."""

    model = SlackChannel
    extra = 0
    max_num = 1


class ApprovalPolicyInline(admin.TabularInline):
    model = ApprovalPolicy
    extra = 1


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "alerts_pause_agent", "history_days", "created_at"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline, ApprovalPolicyInline, SlackChannelInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "role", "project", "from_sign_in"]
    list_filter = ["role", "project", "from_sign_in"]
    autocomplete_fields = ["user"]
    readonly_fields = ["from_sign_in"]


@admin.register(ProviderIdentity)
class ProviderIdentityAdmin(admin.ModelAdmin):
    """Who each account is at the single sign-on provider. Deleting a row unlinks the
    account: the person's next sign-in links or makes one anew."""

    list_display = ["user", "issuer", "subject", "linked_at", "last_sign_in_at"]
    search_fields = ["user__username", "subject"]
    readonly_fields = ["user", "issuer", "subject", "linked_at", "last_sign_in_at"]

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(ApprovalPolicy)
class ApprovalPolicyAdmin(admin.ModelAdmin):
    list_display = [
        "project",
        "action",
        "condition",
        "min_risk",
        "approvals_required",
        "decision_timeout",
        "approval_ttl",
    ]
    list_filter = ["project", "min_risk", "approvals_required"]
    fieldsets = [
        (None, {"fields": ["project", "action", "min_risk", "approvals_required"]}),
        (
            "Only when an argument passes a test (blank: always)",
            {"fields": ["when_argument", "when_operator", "when_value"]},
        ),
        ("Timeouts (blank: the settings)", {"fields": ["decision_timeout", "approval_ttl"]}),
    ]


@admin.register(Session)
class SessionAdmin(ReadOnlyAdmin):
    list_display = ["id", "title", "agent", "owner", "project", "created_at"]
    list_filter = ["project"]
    list_select_related = ["owner", "project"]


class MessageInline(ReadOnlyInline):
    model = Message
    fields = ["seq", "kind", "author", "author_kind", "payload", "created_at"]


class OperationInline(ReadOnlyInline):
    model = Operation
    fields = ["call_id", "action", "status", "risk", "created_at"]


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ["id", "goal", "status", "reason", "version", "project", "created_at"]
    list_filter = ["status", "reason", "project"]
    search_fields = ["goal"]
    list_select_related = ["project"]
    inlines = [MessageInline, OperationInline]


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = ["run", "seq", "kind", "author", "author_kind", "created_at"]
    list_filter = ["kind"]


class DecisionInline(ReadOnlyInline):
    model = Decision
    fields = ["kind", "reviewer", "policy", "arguments_hash", "comment", "created_at"]


@admin.register(Operation)
class OperationAdmin(ReadOnlyAdmin):
    list_display = ["id", "action", "call_id", "status", "risk", "run", "created_at"]
    list_filter = ["status", "risk", "rollback_kind", "project"]
    search_fields = ["call_id", "action", "idempotency_key"]
    inlines = [DecisionInline]


@admin.register(Decision)
class DecisionAdmin(ReadOnlyAdmin):
    list_display = ["operation", "kind", "reviewer", "policy", "created_at"]
    list_filter = ["kind"]


class CheckpointArtifactInline(ReadOnlyInline):
    model = CheckpointArtifact


@admin.register(Checkpoint)
class CheckpointAdmin(ReadOnlyAdmin):
    list_display = ["run", "seq", "event", "from_status", "to_status", "actor_label", "created_at"]
    list_filter = ["event", "actor_kind", "to_status"]
    search_fields = ["reason", "hash"]
    inlines = [CheckpointArtifactInline]


@admin.register(AdminCheckpoint)
class AdminCheckpointAdmin(ReadOnlyAdmin):
    """The installation's own checkpoints: configuration applied, workers paused."""

    list_display = ["seq", "event", "project", "actor_label", "created_at"]
    list_filter = ["event", "project"]
    search_fields = ["event", "actor_label", "hash"]


@admin.register(CheckpointArtifact)
class CheckpointArtifactAdmin(ReadOnlyAdmin):
    list_display = ["checkpoint", "name", "artifact"]
    search_fields = ["name", "artifact__sha256"]


@admin.register(Artifact)
class ArtifactAdmin(ReadOnlyAdmin):
    list_display = ["sha256", "size", "created_at"]
    search_fields = ["sha256"]


class AlertDeliveryInline(ReadOnlyInline):
    model = AlertDelivery


@admin.register(Alert)
class AlertAdmin(ReadOnlyAdmin):
    list_display = ["id", "summary", "status", "run", "project", "created_at"]
    list_filter = ["status", "project"]
    inlines = [AlertDeliveryInline]


@admin.register(AlertDelivery)
class AlertDeliveryAdmin(ReadOnlyAdmin):
    list_display = ["alert", "channel", "target", "status", "attempts", "delivered_at"]
    list_filter = ["channel", "status"]
