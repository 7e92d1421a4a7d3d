"""Loading a configuration file, applying its plan, and writing the database's state
back out in the same format (so that ``export_config`` then ``apply_config`` changes
nothing)."""

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import yaml
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction

from runs.actors import Actor
from runs.configuration.document import Problems, read
from runs.configuration.plan import Change, plan
from runs.configuration.schema import VERSION, Config, config, duration_text
from runs.models import Membership, Project, SlackChannel
from runs.services.admin_record import record_admin_act

# When the database changed between the diff printed and the transaction applying it.
CHANGED = (
    "{path}: the database changed since the changes above were worked out; nothing "
    "applied: run apply_config again"
)


class ConfigProblems(Exception):
    """The file cannot be applied; ``lines`` says why, each ``FILE:LINE: what``."""

    def __init__(self, lines: list[str]):
        super().__init__(lines[0] if lines else "")
        self.lines = lines


@dataclass(frozen=True)
class Loaded:
    path: Path
    sha256: str
    specs: Config
    changes: list[Change]


def load(path: Path) -> Loaded:
    """The file's plan against the database as it is now (``ConfigProblems`` if the
    file cannot be read or does not hold)."""
    try:
        content = path.read_bytes()
        text = content.decode()
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigProblems([f"{path}: cannot be read: {error}"]) from None
    problems = Problems(str(path))
    root = read(text, problems)
    specs = config(root, problems) if root is not None else None
    if specs is None:
        raise ConfigProblems(problems.lines())
    return Loaded(path, hashlib.sha256(content).hexdigest(), specs, plan(specs))


def apply(loaded: Loaded, actor: Actor) -> list[str]:
    """Make every change in one transaction, each project's recorded as an admin
    checkpoint naming who applied which file (and the users' as one more); returns what
    must be shown once."""
    try:
        with transaction.atomic():
            return _apply(loaded, actor)
    except IntegrityError:  # Another apply, or an admin, made the same row meanwhile.
        raise ConfigProblems([CHANGED.format(path=loaded.path)]) from None


def _apply(loaded: Loaded, actor: Actor) -> list[str]:
    """The changes, planned again in the transaction that makes them: what is written is
    what was printed and what the checkpoints record, or nothing."""
    changes = plan(loaded.specs)
    if [change.text for change in changes] != [change.text for change in loaded.changes]:
        raise ConfigProblems([CHANGED.format(path=loaded.path)])
    shown = [note for change in changes if (note := change.make())]
    for slug in dict.fromkeys(change.project for change in changes):
        record_admin_act(
            "config.applied",
            actor,
            project=Project.objects.get(slug=slug) if slug else None,
            detail={
                "file": loaded.path.name,
                "sha256": loaded.sha256,
                "changes": [change.text for change in changes if change.project == slug],
            },
        )
    return shown


def export(slugs: list[str] | None = None) -> tuple[str, list[str]]:
    """The projects (all, or those named) and their members' accounts as a configuration
    file, and the environment variables its webhooks' URLs are to be read from (a URL
    may hold the receiver's secret, so the file names a variable instead)."""
    projects = Project.objects.order_by("slug").prefetch_related("policies", "webhooks")
    if slugs:
        projects = projects.filter(slug__in=slugs)
    members = Membership.objects.filter(project__in=projects, from_sign_in=False)
    channels = dict(
        SlackChannel.objects.filter(project__in=projects).values_list("project", "channel")
    )
    roles: dict[int, dict[str, list[str]]] = {}
    for project_id, username, role in members.order_by("user__username", "role__name").values_list(
        "project", "user__username", "role__name"
    ):
        roles.setdefault(project_id, {}).setdefault(username, []).append(role)
    users = get_user_model().objects.filter(memberships__in=members).distinct().order_by("username")
    variables = []
    document = {
        "version": VERSION,
        "users": [_user(user) for user in users],
        "projects": [
            _project(project, roles.get(project.pk, {}), channels.get(project.pk, ""), variables)
            for project in projects
        ],
    }
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True), variables


def _user(user) -> dict:
    fields = {"username": user.username, "email": user.email}
    fields |= {"first_name": user.first_name, "last_name": user.last_name}
    return {key: value for key, value in fields.items() if value}


def _project(project: Project, members: dict, channel: str, variables: list[str]) -> dict:
    entry = {"slug": project.slug, "name": project.name}
    alerts = {"pause_agent": project.alerts_pause_agent, "emails": project.alert_emails}
    entry["alerts"] = {key: value for key, value in alerts.items() if value}
    if project.history_days is not None:
        entry["history_days"] = project.history_days
    entry["members"] = members
    entry["policies"] = [_policy(policy) for policy in project.policies.all()]
    if channel:
        entry["slack_channel"] = channel
    entry["webhooks"] = [
        _webhook(project, webhook, variables) for webhook in project.webhooks.all()
    ]
    return {key: value for key, value in entry.items() if value != {} and value != []}


def _policy(policy) -> dict:
    entry = {"action": policy.action}
    if policy.when_argument:
        entry["when"] = {
            "argument": policy.when_argument,
            "operator": policy.when_operator,
            "value": policy.when_value,
        }
    entry |= {"min_risk": policy.min_risk, "approvals": policy.approvals_required}
    for field in ("decision_timeout", "approval_ttl"):
        if value := getattr(policy, field):
            entry[field] = duration_text(value)
    return {key: value for key, value in entry.items() if value != ""}


def _webhook(project: Project, webhook, variables: list[str]) -> dict:
    name = f"OVERSIGHT_WEBHOOK_URL_{project.slug}_{webhook.name}".upper()
    variable = re.sub(r"[^A-Z0-9]+", "_", name).strip("_")
    variables.append(f"{variable}: the URL of webhook {webhook.name!r} of {project.slug}")
    return {
        "name": webhook.name,
        "url_env": variable,
        "events": webhook.events,
        "active": webhook.active,
    }
