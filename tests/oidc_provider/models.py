from django.conf import settings
from django.db import models


class Profile(models.Model):
    """What an identity provider knows of a person beyond Django's user: the display name
    and whether the email address was verified (a relying party may refuse one that was
    not). Its table is made by ``migrate --run-syncdb``: the database is new every start."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    name = models.CharField(max_length=200, blank=True)
    email_verified = models.BooleanField(default=True)

    def __str__(self) -> str:
        return self.name or str(self.user)
