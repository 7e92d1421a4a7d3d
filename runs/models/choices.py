"""Choices shared by several models, and a CheckConstraint for every TextChoices column."""

from django.db import models


def choices_constraint(field: str, choices: type[models.TextChoices], name: str):
    return models.CheckConstraint(condition=models.Q(**{f"{field}__in": choices.values}), name=name)


class Risk(models.TextChoices):
    """In order: a policy's minimum risk raises an agent's lower one."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
