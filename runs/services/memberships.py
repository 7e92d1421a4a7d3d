"""Memberships granted by single sign-on (``Membership.from_sign_in``): what the
provider's groups give at each sign-in, and how long that lasts without one.

Oversight learns of a person's groups only when they sign in. So a role the groups gave
lasts ``OVERSIGHT_OIDC_ROLE_SECONDS`` after the sign-in that last confirmed it (by
default as long as the session it began), and the workers take it back then: someone
removed from a group at the provider cannot keep deciding by other ways in (a Slack
button, a password) for longer. Memberships given by hand are never touched here."""

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import transaction
from django.db.models import Exists, OuterRef

from runs.models import Membership, Project, ProviderIdentity

log = logging.getLogger("oversight.sign_in")


@transaction.atomic
def grant_roles(user, groups: set[str]) -> None:
    """Make ``user``'s memberships granted at sign-in exactly those ``groups`` map to
    (``OVERSIGHT_OIDC_ROLES``). A rule naming a project that does not exist grants
    nothing, and says so in the log."""
    rules = [rule for rule in settings.OVERSIGHT_OIDC_ROLES if rule.group in groups]
    projects = Project.objects.in_bulk([rule.project for rule in rules], field_name="slug")
    roles = Group.objects.in_bulk({rule.role for rule in rules}, field_name="name")
    wanted = set()
    for rule in rules:
        if rule.project not in projects:
            log.warning("single sign-on: no project %r for group %r", rule.project, rule.group)
            continue
        wanted.add((projects[rule.project].pk, roles[rule.role].pk))
    held = {(m.project_id, m.role_id): m for m in Membership.objects.filter(user=user)}
    for key, membership in held.items():
        if membership.from_sign_in and key not in wanted:
            membership.delete()
            log.info("single sign-on: %s is no longer %s", user, _role_words(membership))
    for project_id, role_id in wanted - held.keys():
        granted = Membership.objects.create(
            user=user, project_id=project_id, role_id=role_id, from_sign_in=True
        )
        log.info("single sign-on: %s is now %s", user, _role_words(granted))


def expire_sign_in_roles(now: datetime) -> int:
    """Take back the roles granted at sign-in of everyone whose last sign-in through the
    provider is older than ``OVERSIGHT_OIDC_ROLE_SECONDS`` at ``now``; how many."""
    cutoff = now - timedelta(seconds=settings.OVERSIGHT_OIDC_ROLE_SECONDS)
    confirmed = ProviderIdentity.objects.filter(user=OuterRef("user"), last_sign_in_at__gte=cutoff)
    lapsed = Membership.objects.filter(from_sign_in=True).exclude(Exists(confirmed))
    taken = [f"{m.user} {_role_words(m)}" for m in lapsed.select_related("user", "role", "project")]
    if taken:
        lapsed.delete()
        log.info(
            "single sign-on: roles not confirmed by a sign-in taken back: %s", "; ".join(taken)
        )
    return len(taken)


def _role_words(membership: Membership) -> str:
    return f"{membership.role.name} in {membership.project.slug}"
