"""Who caused a state change. Every checkpoint names one actor."""

from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import models

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser


class ActorKind(models.TextChoices):
    USER = "user"
    AGENT = "agent"
    WORKER = "worker"
    POLICY = "policy"


@dataclass(frozen=True)
class Actor:
    kind: ActorKind
    label: str
    user: "AbstractBaseUser | None" = None

    @classmethod
    def of_user(cls, user) -> "Actor":
        return cls(ActorKind.USER, user.get_username(), user)

    @classmethod
    def agent(cls, name: str) -> "Actor":
        return cls(ActorKind.AGENT, name)

    @classmethod
    def worker(cls, name: str) -> "Actor":
        return cls(ActorKind.WORKER, name)

    @classmethod
    def policy(cls, name: str) -> "Actor":
        return cls(ActorKind.POLICY, name)
