import hashlib
import secrets

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Exists, OuterRef
from django.utils import timezone

from runs.models.projects import Membership, Project

PREFIX_LENGTH = 10


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class AgentToken(models.Model):
    """A per-project credential for an agent. Only a hash of the secret is stored; the
    token is shown once, when created. Sessions an agent opens belong to ``owner``, who
    must be a member of the project."""

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="agent_tokens")
    name = models.CharField(max_length=100)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="agent_tokens"
    )
    prefix = models.CharField(max_length=PREFIX_LENGTH, unique=True)
    secret_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # The seq of the token's latest feed entry (``FeedEvent``).
    feed_seq = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="token_unique_name")
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.project})"

    def clean(self) -> None:
        if self.project_id is None or self.owner_id is None:
            return  # Reported as missing fields.
        if not self.project.memberships.filter(user_id=self.owner_id).exists():
            raise ValidationError(
                {
                    "owner": f"{self.owner} is not a member of {self.project}: "
                    "a token acts only for one of its project's members"
                }
            )

    @classmethod
    def issue(cls, *, project: Project, name: str, owner) -> tuple["AgentToken", str]:
        """Create a token; returns it with the only copy of its plain text. An ``owner``
        who is not a member of ``project`` is refused (ValidationError)."""
        prefix, secret = secrets.token_hex(PREFIX_LENGTH // 2), secrets.token_urlsafe(32)
        token = cls(
            project=project, name=name, owner=owner, prefix=prefix, secret_hash=hash_secret(secret)
        )
        token.clean()
        token.save()
        return token, f"ovs_{prefix}_{secret}"

    @classmethod
    def acting(cls) -> models.QuerySet:
        """The tokens that still act: not revoked, and their owner an active member of
        their project (a token acts only for a member)."""
        member = Membership.objects.filter(project=OuterRef("project"), user=OuterRef("owner"))
        return cls.objects.filter(Exists(member), owner__is_active=True, revoked_at__isnull=True)

    @classmethod
    def authenticate(cls, plain: str) -> "AgentToken | None":
        """The token ``plain`` names, unless it is unknown or revoked, or its owner is no
        longer an active member of its project: a token acts only for a member, so it
        stops working when its owner leaves (in one query, with the lookup)."""
        try:
            _, prefix, secret = plain.split("_", 2)
        except ValueError:
            return None
        token = cls.acting().select_related("project", "owner").filter(prefix=prefix).first()
        if token is None:
            return None
        if not secrets.compare_digest(token.secret_hash, hash_secret(secret)):
            return None
        return token

    def revoke(self) -> None:
        AgentToken.objects.filter(pk=self.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
