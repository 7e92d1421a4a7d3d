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
    must be a member of the project. Its ``issued_by`` may not decide on what its agent
    proposes or asks, nor may its owner (four eyes); a token that would act for another
    member than its issuer acts only once that member accepts it, so that no one's name
    is put on an agent's work without their consent."""

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="agent_tokens")
    name = models.CharField(max_length=100)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="agent_tokens"
    )
    # Null only for tokens issued before issuers were recorded (migration 0028).
    issued_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="issued_agent_tokens",
    )
    # When its owner accepted it; null while it waits for them (it does not act).
    accepted_at = models.DateTimeField(null=True, blank=True)
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
    def issue(
        cls, *, project: Project, name: str, owner, issued_by=None, stand_in: bool = False
    ) -> tuple["AgentToken", str]:
        """Create a token; returns it with the only copy of its plain text. An ``owner``
        who is not a member of ``project`` is refused (ValidationError). ``issued_by``
        (default: ``owner``) is who issued it. It acts at once for its issuer or for
        ``stand_in``, a user made for it who never signs in; for anyone else, once they
        accept it (``accept``)."""
        issued_by = issued_by or owner
        prefix, secret = secrets.token_hex(PREFIX_LENGTH // 2), secrets.token_urlsafe(32)
        token = cls(
            project=project,
            name=name,
            owner=owner,
            issued_by=issued_by,
            accepted_at=timezone.now() if stand_in or issued_by == owner else None,
            prefix=prefix,
            secret_hash=hash_secret(secret),
        )
        token.clean()
        token.save()
        return token, f"ovs_{prefix}_{secret}"

    @classmethod
    def acting(cls) -> models.QuerySet:
        """The tokens that still act: accepted by their owner, not revoked, and their
        owner an active member of their project (a token acts only for a member)."""
        member = Membership.objects.filter(project=OuterRef("project"), user=OuterRef("owner"))
        return cls.objects.filter(
            Exists(member),
            owner__is_active=True,
            accepted_at__isnull=False,
            revoked_at__isnull=True,
        )

    @classmethod
    def awaiting(cls) -> models.QuerySet:
        """The tokens that wait for their owner's acceptance (and are not revoked)."""
        return cls.objects.filter(accepted_at__isnull=True, revoked_at__isnull=True)

    @classmethod
    def named(cls, plain: str) -> "AgentToken | None":
        """The token ``plain`` names, its secret checked, whatever its state (in one
        query): ``acts`` says whether it acts (``acting``), ``waits`` whether it waits
        for its owner's acceptance."""
        try:
            _, prefix, secret = plain.split("_", 2)
        except ValueError:
            return None
        token = (
            cls.objects.select_related("project", "owner")
            .annotate(acts=Exists(cls.acting().filter(pk=OuterRef("pk"))))
            .filter(prefix=prefix)
            .first()
        )
        if token is None or not secrets.compare_digest(token.secret_hash, hash_secret(secret)):
            return None
        return token

    @classmethod
    def authenticate(cls, plain: str) -> "AgentToken | None":
        """The token ``plain`` names, unless it is unknown or revoked, waits for its
        owner's acceptance, or its owner is no longer an active member of its project: a
        token acts only for a member, so it stops working when its owner leaves."""
        token = cls.named(plain)
        return token if token is not None and token.acts else None

    @property
    def refusal(self) -> str:
        """Why the API refuses it while it waits for its owner's acceptance: told only to
        whoever holds its secret (any other refusal says nothing about the token)."""
        return (
            f"this agent token waits for {self.owner.get_username()}'s acceptance: it acts "
            "once they accept it on their account page"
        )

    @property
    def waits(self) -> bool:
        """Whether it waits for its owner's acceptance (and so does not act yet)."""
        return self.accepted_at is None and self.revoked_at is None

    def accept(self) -> bool:
        """Its owner accepts that it acts for them: it acts from now on. False if it no
        longer waits (accepted, or revoked, meanwhile)."""
        return self._settle(accepted_at=timezone.now())

    def decline(self) -> bool:
        """Its owner refuses it: it is revoked and never acts. False if it no longer
        waits."""
        return self._settle(revoked_at=timezone.now())

    def _settle(self, **change) -> bool:
        """One answer of its owner, only while it waits: a conditional update, so that
        an accept and a decline (or a revoke) at once do not both hold."""
        return bool(AgentToken.awaiting().filter(pk=self.pk).update(**change))

    def revoke(self) -> None:
        AgentToken.objects.filter(pk=self.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
