"""The configuration file's schema (docs/operating/configuration.md): what each entry
may say, checked with the models' own rules, into the specs ``plan`` compares with the
database. Every problem names its line; nothing is written while any is left."""

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

from runs.configuration.document import Node, Problems
from runs.models import ApprovalPolicy, Project, Role, SlackChannel, WebhookEndpoint

VERSION = 1
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DURATION = re.compile(r"^(\d{1,6})([smhd])$")
# The file's names for the model fields whose names differ, in the models' messages.
FILE_NAMES = {
    "when_argument": "when.argument",
    "when_operator": "when.operator",
    "when_value": "when.value",
    "approvals_required": "approvals",
    "alert_emails": "alerts.emails",
}


@dataclass(frozen=True)
class UserSpec:
    username: str
    email: str
    first_name: str
    last_name: str


@dataclass(frozen=True)
class PolicySpec:
    action: str
    when_argument: str
    when_operator: str
    when_value: object
    min_risk: str
    approvals_required: int
    decision_timeout: timedelta | None
    approval_ttl: timedelta | None

    @property
    def key(self) -> tuple:
        """What tells one rule from another (the fields a policy is matched by)."""
        value = json.dumps(self.when_value, sort_keys=True)
        return (self.action, self.when_argument, self.when_operator, value)


@dataclass(frozen=True)
class WebhookSpec:
    name: str
    url: str
    events: tuple[str, ...]
    active: bool


@dataclass(frozen=True)
class ProjectSpec:
    slug: str
    name: str
    alerts_pause_agent: bool
    alert_emails: tuple[str, ...]
    history_days: int | None
    members: dict[str, frozenset[str]]
    policies: tuple[PolicySpec, ...]
    slack_channel: str
    webhooks: tuple[WebhookSpec, ...]


@dataclass(frozen=True)
class Config:
    users: tuple[UserSpec, ...]
    projects: tuple[ProjectSpec, ...]


def config(root: Node, problems: Problems) -> Config | None:
    """The file's specs, or ``None`` with every problem added."""
    top = _mapping(root, "the file", {"version", "users", "projects"}, problems)
    if top is None:
        return None
    version = top.get("version")
    if version is None:
        problems.add(root.line, f"'version: {VERSION}' is missing")
    elif version.value != VERSION:
        problems.add(version.line, f"version {version.value!r}: this Oversight reads {VERSION}")
    users = _entries(top, "users", _user, problems)
    projects = _entries(top, "projects", _project, problems)
    _unique(users, lambda user: user.username, "user", problems)
    _unique(projects, lambda project: project.slug, "project", problems)
    _members_known({user.username for user, _ in users}, projects, problems)
    if problems:
        return None
    return Config(tuple(user for user, _ in users), tuple(project for project, _ in projects))


def _entries(parent: dict, key: str, read: Callable, problems: Problems) -> list[tuple]:
    """Each entry of the list ``parent[key]`` read by ``read``, with its line; entries
    with problems are left out (their problems are added)."""
    node = parent.get(key)
    if node is None:
        return []
    if not isinstance(node.value, list):
        problems.add(node.line, f"{key} must be a list (entries starting with '-')")
        return []
    read_ones = ((read(entry, problems), entry.line) for entry in node.value)
    return [(spec, line) for spec, line in read_ones if spec is not None]


def _unique(entries: list[tuple], key: Callable, what: str, problems: Problems) -> None:
    first: dict = {}
    for spec, line in entries:
        name = key(spec)
        if name in first:
            problems.add(line, f"{what} {name!r} is given twice (first at line {first[name]})")
        first.setdefault(name, line)


def _members_known(listed: set[str], projects: list[tuple], problems: Problems) -> None:
    """Every member is a user of the file's or one that exists already."""
    named = {name for project, _ in projects for name in project.members} - listed
    existing = set(
        get_user_model().objects.filter(username__in=named).values_list("username", flat=True)
    )
    for project, line in projects:
        for name in sorted(set(project.members) - listed - existing):
            problems.add(
                line,
                f"project {project.slug!r}: member {name!r} is neither under users nor "
                "an existing account",
            )


def _user(node: Node, problems: Problems) -> UserSpec | None:
    entry = _mapping(node, "a user", {"username", "email", "first_name", "last_name"}, problems)
    if entry is None:
        return None
    username = _text(entry, "username", node, problems, required=True)
    spec = UserSpec(
        username=username,
        email=_text(entry, "email", node, problems),
        first_name=_text(entry, "first_name", node, problems),
        last_name=_text(entry, "last_name", node, problems),
    )
    user = get_user_model()(**{field: getattr(spec, field) for field in UserSpec.__annotations__})
    _model_rules(user, node, entry, {"password"}, problems)
    return spec


def _project(node: Node, problems: Problems) -> ProjectSpec | None:
    known = {"slug", "name", "alerts", "history_days", "members", "policies", "slack_channel"}
    entry = _mapping(node, "a project", known | {"webhooks"}, problems)
    if entry is None:
        return None
    slug = _text(entry, "slug", node, problems, required=True)
    name = _text(entry, "name", node, problems, required=True)
    pause_agent, emails = _alerts(entry.get("alerts"), problems)
    history_days = _whole(entry, "history_days", problems)
    project = Project(slug=slug, name=name, alert_emails=list(emails), history_days=history_days)
    _model_rules(project, node, {**entry, "alert_emails": entry.get("alerts")}, set(), problems)
    slack_channel = _text(entry, "slack_channel", node, problems)
    if slack_channel and not SlackChannel.is_channel_id(slack_channel):
        problems.add(entry["slack_channel"].line, f"{slack_channel!r} is not a Slack channel id")
    webhooks = _entries(entry, "webhooks", _webhook, problems)
    policies = _entries(entry, "policies", _policy, problems)
    _unique(webhooks, lambda webhook: webhook.name, "webhook", problems)
    _unique(policies, lambda policy: policy.key, "policy", problems)
    return ProjectSpec(
        slug=slug,
        name=name,
        alerts_pause_agent=pause_agent,
        alert_emails=emails,
        history_days=history_days,
        members=_members(entry.get("members"), problems),
        policies=tuple(policy for policy, _ in policies),
        slack_channel=slack_channel,
        webhooks=tuple(webhook for webhook, _ in webhooks),
    )


def _alerts(node: Node | None, problems: Problems) -> tuple[bool, tuple[str, ...]]:
    if node is None:
        return False, ()
    entry = _mapping(node, "alerts", {"pause_agent", "emails"}, problems)
    if entry is None:
        return False, ()
    return _boolean(entry, "pause_agent", False, problems), tuple(_texts(entry, "emails", problems))


def _members(node: Node | None, problems: Problems) -> dict[str, frozenset[str]]:
    """``username: [role, …]`` (or one role)."""
    if node is None:
        return {}
    if not isinstance(node.value, dict):
        problems.add(node.line, "members must be a mapping: 'username: [reviewer, admin]'")
        return {}
    members = {}
    for username, roles in node.value.items():
        line = node.key_lines[username]
        names = _role_names(roles)
        if names is None:
            problems.add(line, f"{username}: a role or a list of roles ({_roles()})")
        elif unknown := sorted(names - set(Role.values)):
            problems.add(line, f"{username}: no role {unknown[0]!r} (roles: {_roles()})")
        else:
            members[username] = names
    return members


def _role_names(roles: Node) -> frozenset[str] | None:
    if isinstance(roles.value, str):
        return frozenset({roles.value})
    if isinstance(roles.value, list) and all(isinstance(role.value, str) for role in roles.value):
        return frozenset(role.value for role in roles.value)
    return None


def _roles() -> str:
    return ", ".join(Role.values)


def _policy(node: Node, problems: Problems) -> PolicySpec | None:
    known = {"action", "when", "min_risk", "approvals", "decision_timeout", "approval_ttl"}
    entry = _mapping(node, "a policy", known, problems)
    if entry is None:
        return None
    when = _when(entry.get("when"), problems)
    spec = PolicySpec(
        action=_text(entry, "action", node, problems),
        when_argument=_text(when, "argument", node, problems),
        when_operator=_text(when, "operator", node, problems),
        when_value=when["value"].value if "value" in when else None,
        min_risk=_text(entry, "min_risk", node, problems),
        approvals_required=_approvals(entry.get("approvals"), problems),
        decision_timeout=_duration(entry, "decision_timeout", problems),
        approval_ttl=_duration(entry, "approval_ttl", problems),
    )
    fields = {**entry, "when_argument": when.get("argument"), "when_operator": when.get("operator")}
    fields |= {"when_value": when.get("value"), "approvals_required": entry.get("approvals")}
    _model_rules(ApprovalPolicy(**spec.__dict__), node, fields, {"project"}, problems)
    return spec


def _approvals(node: Node | None, problems: Problems) -> int:
    if node is None:
        return ApprovalPolicy.Approvals.ONE
    if isinstance(node.value, bool) or node.value not in ApprovalPolicy.Approvals.values:
        problems.add(node.line, "approvals: 0 (auto-approve), 1 or 2")
        return ApprovalPolicy.Approvals.ONE
    return node.value


def _when(node: Node | None, problems: Problems) -> dict:
    """A policy's condition: ``{argument: amount, operator: gt, value: 1000}``."""
    if node is None:
        return {}
    when = _mapping(node, "when", {"argument", "operator", "value"}, problems)
    if when is None:
        return {}
    for key in sorted({"argument", "operator", "value"} - set(when)):
        problems.add(node.line, f"when: '{key}' is missing")
    return when


def _webhook(node: Node, problems: Problems) -> WebhookSpec | None:
    entry = _mapping(node, "a webhook", {"name", "url", "url_env", "events", "active"}, problems)
    if entry is None:
        return None
    url = _text(entry, "url", node, problems)
    if ("url" in entry) == ("url_env" in entry):
        problems.add(node.line, "a webhook needs one of url or url_env (the URL's variable)")
    elif "url_env" in entry:
        variable = _text(entry, "url_env", node, problems)
        url = os.environ.get(variable, "")
        if variable and not url:
            problems.add(entry["url_env"].line, f"url_env: ${variable} is not set here")
    spec = WebhookSpec(
        name=_text(entry, "name", node, problems, required=True),
        url=url,
        events=tuple(_texts(entry, "events", problems)),
        active=_boolean(entry, "active", True, problems),
    )
    if url:
        endpoint = WebhookEndpoint(name=spec.name, url=url, events=list(spec.events))
        _model_rules(endpoint, node, entry, {"project", "salt"}, problems)
    return spec


def _model_rules(instance, node: Node, fields: dict, exclude: set[str], problems: Problems) -> None:
    """The model's own validation (field validators and ``clean``), each message at the
    line of the file's key it concerns."""
    try:
        instance.full_clean(exclude=exclude, validate_unique=False, validate_constraints=False)
    except ValidationError as error:
        for field_name, messages in error.message_dict.items():
            key = fields.get(field_name)
            line = key.line if isinstance(key, Node) else node.line
            where = "" if field_name == "__all__" else f"{FILE_NAMES.get(field_name, field_name)}: "
            problems.add(line, where + " ".join(messages))


def _mapping(node: Node, what: str, known: set[str], problems: Problems) -> dict | None:
    if not isinstance(node.value, dict):
        problems.add(node.line, f"{what} must be a mapping ('key: value' lines)")
        return None
    for key in sorted(set(node.value) - known):
        problems.add(node.key_lines[key], f"{key!r} is not a setting of {what} ({_list(known)})")
    return node.value


def _list(keys: set[str]) -> str:
    return ", ".join(sorted(keys))


def _text(entry: dict, key: str, parent: Node, problems: Problems, required=False) -> str:
    node = entry.get(key)
    if node is None:
        if required:
            problems.add(parent.line, f"'{key}' is missing")
        return ""
    if not isinstance(node.value, str):
        problems.add(node.line, f"{key} must be text, not {node.value!r}")
        return ""
    return node.value.strip()


def _texts(entry: dict, key: str, problems: Problems) -> list[str]:
    node = entry.get(key)
    if node is None:
        return []
    if not isinstance(node.value, list) or not all(
        isinstance(item.value, str) for item in node.value
    ):
        problems.add(node.line, f"{key} must be a list of text")
        return []
    return [item.value.strip() for item in node.value]


def _whole(entry: dict, key: str, problems: Problems) -> int | None:
    node = entry.get(key)
    if node is None:
        return None
    if isinstance(node.value, bool) or not isinstance(node.value, int):
        problems.add(node.line, f"{key} must be a whole number, not {node.value!r}")
        return None
    return node.value


def _boolean(entry: dict, key: str, default: bool, problems: Problems) -> bool:
    node = entry.get(key)
    if node is None:
        return default
    if not isinstance(node.value, bool):
        problems.add(node.line, f"{key} must be true or false, not {node.value!r}")
        return default
    return node.value


def _duration(entry: dict, key: str, problems: Problems) -> timedelta | None:
    """``90s``, ``30m``, ``4h`` or ``2d``."""
    node = entry.get(key)
    if node is None:
        return None
    found = DURATION.match(str(node.value))
    if not found or isinstance(node.value, bool):
        problems.add(node.line, f"{key}: a duration such as 90s, 30m, 4h or 2d, not {node.value!r}")
        return None
    return timedelta(seconds=int(found[1]) * UNITS[found[2]])


def duration_text(value: timedelta) -> str:
    """The shortest way the file writes ``value`` (the inverse of ``_duration``)."""
    seconds = int(value.total_seconds())
    unit = next(u for u in ("d", "h", "m", "s") if seconds % UNITS[u] == 0)
    return f"{seconds // UNITS[unit]}{unit}"
