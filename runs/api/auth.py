from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from ninja.security import HttpBearer

from runs.models import AgentToken

LAST_USE_GRANULARITY = timedelta(seconds=60)


class PayloadTooLarge(Exception):
    pass


class TokenWaits(Exception):
    """The token waits for its owner's acceptance: a 401 that says so."""


class TokenAuth(HttpBearer):
    """``Authorization: Bearer ovs_…``. An unknown or revoked token is a 401, and one
    that waits for its owner's acceptance a 401 saying so. Runs before the body is
    parsed, so an oversized body is refused (413) unread."""

    def authenticate(self, request, token: str) -> AgentToken | None:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
        if length > settings.OVERSIGHT_API_MAX_BODY_BYTES:
            raise PayloadTooLarge(
                f"request body of {length} bytes is over {settings.OVERSIGHT_API_MAX_BODY_BYTES}"
            )
        agent_token = AgentToken.named(token)
        if agent_token is None or not agent_token.acts:
            if agent_token is not None and agent_token.waits:
                raise TokenWaits(agent_token.refusal)
            return None
        now = timezone.now()
        if not agent_token.last_used_at or now - agent_token.last_used_at > LAST_USE_GRANULARITY:
            # After the request's transaction (an Idempotency-Key's), never inside it: the
            # token's row is also its feed counter, which checkpoint writers (SQLite) lock
            # after their run and feed readers (PostgreSQL) lock to number entries; holding
            # it for the request, then locking a run, would wait on them or deadlock.
            used = AgentToken.objects.filter(pk=agent_token.pk)
            transaction.on_commit(lambda: used.update(last_used_at=now))
        request.agent_token = agent_token
        return agent_token
