"""What applying a configuration would change, as a list of ``Change``: each one line a
person reviews (``+`` added, ``-`` taken away, ``~`` changed) and the write that makes it.

A project the file lists is described whole: its members, policies, Slack channel and
webhooks become what the file says. What the file does not reach is left alone: projects
and users it does not list, and the memberships a sign-in granted (the identity
provider's groups keep those). A webhook the file no longer lists is switched off, not
deleted, so that its deliveries' history stays."""

import json
from collections.abc import Callable
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db.models import Prefetch

from runs.configuration.schema import (
    Config,
    PolicySpec,
    ProjectSpec,
    UserSpec,
    WebhookSpec,
    duration_text,
)
from runs.models import ApprovalPolicy, Membership, Project, SlackChannel, WebhookEndpoint
from runs.permissions import role_group

USER_FIELDS = ("email", "first_name", "last_name")
POLICY_FIELDS = ("min_risk", "approvals_required", "decision_timeout", "approval_ttl")


@dataclass(frozen=True)
class Change:
    """One line of the plan. ``project`` is the slug it concerns (``None``: a user);
    ``make`` writes it and returns what must be shown once (a new webhook's secret)."""

    project: str | None
    text: str
    make: Callable[[], str | None]


def plan(config: Config) -> list[Change]:
    changes = [change for user in config.users for change in _user(user)]
    current = _current_projects([project.slug for project in config.projects])
    for spec in config.projects:
        changes += _project(spec, current.get(spec.slug))
    return changes


def _current_projects(slugs: list[str]) -> dict[str, Project]:
    hand_given = Membership.objects.filter(from_sign_in=False).select_related("user", "role")
    projects = Project.objects.filter(slug__in=slugs).prefetch_related(
        Prefetch("memberships", queryset=hand_given),
        "policies",
        "webhooks",
    )
    slack = dict(
        SlackChannel.objects.filter(project__slug__in=slugs).values_list("project", "channel")
    )
    found = {project.slug: project for project in projects}
    for project in found.values():
        project.slack_channel = slack.get(project.pk, "")
    return found


def _user(spec: UserSpec) -> list[Change]:
    user = get_user_model().objects.filter(username=spec.username).first()
    if user is None:
        email = f" <{spec.email}>" if spec.email else ""
        return [Change(None, f"+ user {spec.username}{email}", lambda: _create_user(spec))]
    changed = {
        field: getattr(spec, field)
        for field in USER_FIELDS
        if getattr(user, field) != getattr(spec, field)
    }
    return [
        Change(
            None,
            f"~ user {spec.username}: {field} {_shown(getattr(user, field))} → {_shown(value)}",
            lambda field=field, value=value: _update(user, {field: value}),
        )
        for field, value in changed.items()
    ]


def _create_user(spec: UserSpec) -> None:
    user = get_user_model()(username=spec.username, **{f: getattr(spec, f) for f in USER_FIELDS})
    user.set_unusable_password()  # They sign in through the provider, or an admin sets one.
    user.save()


def _project(spec: ProjectSpec, project: Project | None) -> list[Change]:
    slug = spec.slug
    wanted = {
        "name": spec.name,
        "alerts_pause_agent": spec.alerts_pause_agent,
        "alert_emails": list(spec.alert_emails),
        "history_days": spec.history_days,
    }
    if project is None:
        settings = "".join(
            f", {field} {_shown(value)}"
            for field, value in wanted.items()
            if value and field != "name"
        )
        text = f"+ project {slug} {_shown(spec.name)}{settings}"
        changes = [Change(slug, text, lambda: _create(slug, wanted))]
        members, policies, channel, webhooks = set(), {}, "", {}
    else:
        changes = [
            Change(
                slug,
                f"~ project {slug}: {field} {_shown(getattr(project, field))} → {_shown(value)}",
                lambda field=field, value=value: _update(project, {field: value}),
            )
            for field, value in wanted.items()
            if getattr(project, field) != value
        ]
        members = {(m.user.username, m.role.name) for m in project.memberships.all()}
        policies = {_key(policy): policy for policy in project.policies.all()}
        channel = project.slack_channel
        webhooks = {webhook.name: webhook for webhook in project.webhooks.all()}
    return [
        *changes,
        *_members(slug, members, spec.members),
        *_policies(slug, policies, spec.policies),
        *_slack(slug, channel, spec.slack_channel),
        *_webhooks(slug, webhooks, spec.webhooks),
    ]


def _create(slug: str, fields: dict) -> None:
    Project.objects.create(slug=slug, **fields)


def _update(instance, fields: dict) -> None:
    for field, value in fields.items():
        setattr(instance, field, value)
    instance.save(update_fields=list(fields))


def _members(slug: str, current: set[tuple[str, str]], wanted: dict) -> list[Change]:
    wanted_pairs = {(username, role) for username, roles in wanted.items() for role in roles}
    added = [
        Change(
            slug, f"+ {slug}: {username} as {role}", lambda u=username, r=role: _grant(slug, u, r)
        )
        for username, role in sorted(wanted_pairs - current)
    ]
    taken = [
        Change(
            slug, f"- {slug}: {username} as {role}", lambda u=username, r=role: _revoke(slug, u, r)
        )
        for username, role in sorted(current - wanted_pairs)
    ]
    return added + taken


def _grant(slug: str, username: str, role: str) -> None:
    user = get_user_model().objects.get(username=username)
    Membership.objects.update_or_create(
        project=Project.objects.get(slug=slug),
        user=user,
        role=role_group(role),
        defaults={"from_sign_in": False},  # The file gives it now: a sign-in keeps off it.
    )


def _revoke(slug: str, username: str, role: str) -> None:
    Membership.objects.filter(
        project__slug=slug, user__username=username, role__name=role, from_sign_in=False
    ).delete()


def _key(policy: ApprovalPolicy) -> tuple:
    value = json.dumps(policy.when_value, sort_keys=True)
    return (policy.action, policy.when_argument, policy.when_operator, value)


def _policies(slug: str, current: dict, wanted: tuple[PolicySpec, ...]) -> list[Change]:
    changes = []
    for spec in wanted:
        policy = current.get(spec.key)
        if policy is None:
            changes.append(
                Change(
                    slug, f"+ {slug}: {describe_policy(spec)}", lambda s=spec: _add_policy(slug, s)
                )
            )
            continue
        changed = {
            f: getattr(spec, f) for f in POLICY_FIELDS if getattr(policy, f) != getattr(spec, f)
        }
        if changed:
            was = describe_policy(policy)
            changes.append(
                Change(
                    slug,
                    f"~ {slug}: {was} → {describe_policy(spec)}",
                    lambda p=policy, c=changed: _update(p, c),
                )
            )
    wanted_keys = {spec.key for spec in wanted}
    changes += [
        Change(slug, f"- {slug}: {describe_policy(policy)}", policy.delete)
        for key, policy in current.items()
        if key not in wanted_keys
    ]
    return changes


def _add_policy(slug: str, spec: PolicySpec) -> None:
    ApprovalPolicy.objects.create(project=Project.objects.get(slug=slug), **spec.__dict__)


def describe_policy(policy: PolicySpec | ApprovalPolicy) -> str:
    """A policy in one line: ``policy payments.transfer when amount > 1000: 2 approvals,
    risk at least high, decided within 4h, approval valid 1h``."""
    rule = policy if isinstance(policy, ApprovalPolicy) else ApprovalPolicy(**policy.__dict__)
    when = f" when {rule.condition}" if rule.when_argument else ""
    terms = [rule.get_approvals_required_display()]
    if rule.min_risk:
        terms.append(f"risk at least {rule.min_risk}")
    if rule.decision_timeout:
        terms.append(f"decided within {duration_text(rule.decision_timeout)}")
    if rule.approval_ttl:
        terms.append(f"approval valid {duration_text(rule.approval_ttl)}")
    return f"policy {rule.action or '(every action)'}{when}: {', '.join(terms)}"


def _slack(slug: str, current: str, wanted: str) -> list[Change]:
    if current == wanted:
        return []
    if not wanted:
        return [Change(slug, f"- {slug}: Slack channel {current}", lambda: _set_channel(slug, ""))]
    text = (
        f"~ {slug}: Slack channel {current} → {wanted}"
        if current
        else f"+ {slug}: Slack channel {wanted}"
    )
    return [Change(slug, text, lambda: _set_channel(slug, wanted))]


def _set_channel(slug: str, channel: str) -> None:
    project = Project.objects.get(slug=slug)
    if channel:
        SlackChannel.objects.update_or_create(project=project, defaults={"channel": channel})
    else:
        SlackChannel.objects.filter(project=project).delete()


def _webhooks(slug: str, current: dict, wanted: tuple[WebhookSpec, ...]) -> list[Change]:
    changes = []
    for spec in wanted:
        webhook = current.get(spec.name)
        if webhook is None:
            text = f"+ {slug}: webhook {_shown(spec.name)} for {', '.join(spec.events)}"
            changes.append(Change(slug, text, lambda s=spec: _add_webhook(slug, s)))
            continue
        changed = {
            field: value
            for field, value in (
                ("url", spec.url),
                ("events", list(spec.events)),
                ("active", spec.active),
            )
            if getattr(webhook, field) != value
        }
        for field, value in changed.items():
            # A URL may hold the receiver's secret (a path token): never printed whole.
            was, now = (
                (webhook.shown_url, "(the new URL)")
                if field == "url"
                else (getattr(webhook, field), value)
            )
            text = f"~ {slug}: webhook {_shown(spec.name)}: {field} {_shown(was)} → {_shown(now)}"
            changes.append(
                Change(slug, text, lambda w=webhook, f=field, v=value: _update(w, {f: v}))
            )
    wanted_names = {spec.name for spec in wanted}
    changes += [
        Change(
            slug,
            f"~ {slug}: webhook {_shown(name)}: switched off (not in the file)",
            lambda w=webhook: w.set_active(False),
        )
        for name, webhook in current.items()
        if name not in wanted_names and webhook.active
    ]
    return changes


def _add_webhook(slug: str, spec: WebhookSpec) -> str:
    project = Project.objects.get(slug=slug)
    webhook, secret = WebhookEndpoint.add(
        project=project, name=spec.name, url=spec.url, events=list(spec.events)
    )
    if not spec.active:
        webhook.set_active(False)
    return f"webhook {spec.name!r} of {slug}: its signing secret (shown this once): {secret}"


def _shown(value) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
