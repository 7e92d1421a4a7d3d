from django.conf import settings
from django.db import models
from django.db.models.functions import Now


class ProviderIdentity(models.Model):
    """Who a person is at the single sign-on provider: the issuer and its ``sub`` claim,
    which the provider promises never to reuse or reassign. A sign-in finds its account
    by this pair only, never by a name or an email address that can change hands."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="provider_identities"
    )
    issuer = models.CharField(max_length=500)
    subject = models.CharField(max_length=255)
    linked_at = models.DateTimeField(db_default=Now())
    last_sign_in_at = models.DateTimeField(db_default=Now())

    class Meta:
        verbose_name_plural = "provider identities"
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="identity_unique_subject")
        ]

    def __str__(self) -> str:
        return f"{self.user} at {self.issuer}"
